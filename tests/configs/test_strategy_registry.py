"""A new engine is one file (its strategy class: capabilities and its own strategy_config check) plus one
registry line; the config checks find it by name, with no engine-name branch outside roll/strategies/."""

import importlib.util
from pathlib import Path

import pytest

import roll.strategies as strategies
from roll.strategies.base import InferenceStrategy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class EchoInferTestDouble(InferenceStrategy):
    """Test double: a generate-only engine with one strategy_config key of its own (never started here)."""

    roles = frozenset({"generate"})
    KEYS = {"echo_tokens": int}

    @classmethod
    def check_strategy_config(cls, strategy_config, *, dtype, world_size):
        for key, value in (strategy_config or {}).items():
            if key not in cls.KEYS:
                raise ValueError(f"echo: unknown strategy_config key {key!r}; valid keys: {sorted(cls.KEYS)}")
            if not isinstance(value, cls.KEYS[key]):
                raise ValueError(f"echo: strategy_config.{key} = {value!r} must be an int")


@pytest.fixture
def launcher(monkeypatch):
    monkeypatch.setattr(strategies, "_STRATEGIES", dict(strategies._STRATEGIES))  # undone after the test
    strategies.register_strategy("echo", f"{__name__}.EchoInferTestDouble")  # the one line
    spec = importlib.util.spec_from_file_location("launcher", EXAMPLES / "start_rlvr_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dry_run(launcher, strategy_config: str) -> int:
    return launcher.main(
        [
            "--config_name",
            "rlvr_tiny",
            "--dry_run",
            "actor_infer.strategy_args.strategy_name=echo",
            f"actor_infer.strategy_args.strategy_config={strategy_config}",
        ]
    )


def test_a_registered_engine_passes_dry_run_with_its_own_keys_checked(launcher, capsys):
    assert dry_run(launcher, "{echo_tokens:3}") == 0, capsys.readouterr().err
    assert "echo" in capsys.readouterr().out
    assert dry_run(launcher, "{echo_tokens:3,bogus:1}") == 2
    err = capsys.readouterr().err
    assert "actor_infer: echo: unknown strategy_config key 'bogus'; valid keys: ['echo_tokens']" in err
    assert dry_run(launcher, "{echo_tokens:three}") == 2
    assert "strategy_config.echo_tokens = 'three' must be an int" in capsys.readouterr().err


def test_a_taken_name_is_not_overwritten(launcher):
    with pytest.raises(ValueError, match="'echo' is already"):
        strategies.register_strategy("echo", "somewhere.Else")


def test_no_engine_name_branch_outside_the_strategies():
    """The config and pipeline code never compare a strategy_name with a literal engine name."""
    roll = Path(strategies.__file__).parents[1]
    names = [name for name in strategies.strategy_names() if name != "echo"]
    offenders = []
    for path in roll.rglob("*.py"):
        if "strategies" in path.relative_to(roll).parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ("strategy_name ==" in line or "strategy_name in (" in line or "name ==" in line) and any(
                f'"{name}"' in line for name in names
            ):
                offenders.append(f"{path.relative_to(roll.parent)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
