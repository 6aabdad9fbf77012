"""The example launchers print a refused input's one message and exit with status 2; the traceback only on request
(--traceback or ROLL_TRACEBACK=1). An unexpected error keeps its traceback. The refusals here come from the
pipeline's start-up checks (model directory, data file, checkpoint), before Ray starts."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from roll.distributed import ray_utils
from roll.pipeline import base

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def launcher(script: str):
    spec = importlib.util.spec_from_file_location(script, EXAMPLES / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def no_ray(monkeypatch):
    """The pipeline's init_ray refuses; the launcher's early start (Ray begins while the config is checked)
    and its stop are recorded instead of run."""

    def refuse(*args, **kwargs):
        raise AssertionError("a refused input must not reach Ray")

    monkeypatch.setattr(base, "init_ray", refuse)
    calls = []
    monkeypatch.setattr(ray_utils, "start_local_ray_early", lambda *args: calls.append(("start", *args)) or True)
    monkeypatch.setattr(ray_utils, "stop_early_ray", lambda: calls.append(("stop",)))
    return calls


def rlvr_args(small_demo, tmp_path, *overrides) -> list[str]:
    return [
        f"model_path={small_demo / 'model'}",
        f"actor_train.data_args.file_name={small_demo / 'train.jsonl'}",
        f"validation.data_args.file_name={small_demo / 'heldout.jsonl'}",
        f"output_dir={tmp_path / 'out'}",
        "track_with=stdout",
        *overrides,
    ]


@pytest.mark.parametrize(
    "override, expected",
    [
        ("model_path={tmp}/no_such_model", "config error: 'actor_train.model_args.model_name_or_path' = "),
        ("actor_train.data_args.file_name={tmp}/missing.jsonl", "error: data_args.file_name: "),
        ("resume_from_checkpoint={tmp}/no_checkpoint", "error: resume_from_checkpoint: "),
    ],
    ids=["model_dir", "data_file", "checkpoint"],
)
def test_a_refused_input_prints_one_message_and_exits_2(override, expected, small_demo, tmp_path, capsys, no_ray):
    rlvr = launcher("start_rlvr_pipeline")
    args = rlvr_args(small_demo, tmp_path, override.replace("{tmp}", str(tmp_path)))
    assert rlvr.main(args) == 2
    err = capsys.readouterr().err  # a library's one-time warnings may come first: the refusal is the last line
    assert err.strip().splitlines()[-1].startswith(expected) and "Traceback" not in err
    assert rlvr.main(["--traceback", *args]) == 2
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_roll_traceback_shows_it_and_an_unexpected_error_keeps_it(small_demo, tmp_path, capsys, monkeypatch, no_ray):
    rlvr = launcher("start_rlvr_pipeline")
    args = rlvr_args(small_demo, tmp_path, f"model_path={tmp_path}/no_such_model")
    monkeypatch.setenv("ROLL_TRACEBACK", "1")
    assert rlvr.main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "no such directory" in err
    monkeypatch.delenv("ROLL_TRACEBACK")
    with pytest.raises(AssertionError, match="a refused input must not reach Ray"):  # not a UserError: raised
        rlvr.main(rlvr_args(small_demo, tmp_path))


def test_the_agentic_launcher_refuses_the_same_way(tmp_path, capsys):
    agentic = launcher("start_agentic_pipeline")
    assert agentic.main([f"model_path={tmp_path}/none", "max_steps=0", "--dry_run"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("config error: 'max_steps' = 0: must be ≥ 1")
    assert "Traceback" not in err


def test_a_refusal_in_a_real_process_has_no_traceback(tmp_path):
    """What a user sees: the process's whole stderr is the one message (issue 31: 23-55 traceback lines)."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "start_rlvr_pipeline.py"), f"model_path={tmp_path}/none"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("config error: 'actor_train.model_args.model_name_or_path'")
    assert "Traceback" not in done.stderr, done.stderr


def test_ray_starts_while_the_config_is_checked_and_stops_after_a_refusal(small_demo, tmp_path, capsys, no_ray):
    """Not with --dry_run; otherwise for the composed config's devices and system_envs, and stopped again when
    the run ends without a pipeline taking it (here: the model directory is refused)."""
    rlvr = launcher("start_rlvr_pipeline")
    args = rlvr_args(small_demo, tmp_path, "system_envs.OMP_NUM_THREADS='2'")
    assert rlvr.main(["--dry_run", *args]) == 0
    assert no_ray == [("stop",)]  # nothing started: stopping is a no-op then
    no_ray.clear()
    assert rlvr.main([*args, f"model_path={tmp_path}/no_such_model"]) == 2
    from roll.configs import compose_config
    from roll.pipeline.rlvr.config import load_rlvr_config

    config = load_rlvr_config(compose_config(str(EXAMPLES / "tiny_rlvr"), "rlvr_tiny", args))
    # the checked config's values, so that the pipeline's init_ray takes the early start instead of a second one
    assert no_ray == [("start", 2, config.system_envs, 1), ("stop",)] and config.system_envs["OMP_NUM_THREADS"] == "2"
