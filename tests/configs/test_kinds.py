"""The table of pipeline kinds (roll/pipeline/kinds.py): each kind is one unit — its folder, its launcher, its
config class implementing the kind interface (roll/configs/base.py) — and its default config passes --dry_run."""

import dataclasses
import importlib
import typing
from pathlib import Path

import pytest

from roll.configs import PipelineConfig, RoleSpec, WorkerConfig
from roll.configs.roles import CAPABILITIES
from roll.pipeline.kinds import KINDS, kind_config

ROOT = Path(__file__).resolve().parents[2]
# what a kind must implement itself (the base raises NotImplementedError)
MUST_IMPLEMENT = ("validate", "optimizer_steps", "describe_plan", "longest_row")


@pytest.mark.parametrize("name", list(KINDS))
def test_a_kind_is_one_folder_with_its_launcher(name):
    cls = kind_config(name)
    assert cls.KIND == name and issubclass(cls, PipelineConfig) and dataclasses.is_dataclass(cls)
    assert cls.__module__ == f"roll.pipeline.{name}.config", "a kind's config class lives in its folder"
    launcher = ROOT / "examples" / f"start_{name}_pipeline.py"
    assert launcher.is_file(), f"{name}: no launcher {launcher}"
    assert f'launch_kind("{name}"' in launcher.read_text()
    module, _, function = cls.PIPELINE.rpartition(".")
    assert module.startswith(f"roll.pipeline.{name}") and callable(getattr(importlib.import_module(module), function))
    assert (ROOT / "examples" / cls.DEFAULT_CONFIG[0] / f"{cls.DEFAULT_CONFIG[1]}.yaml").is_file()


@pytest.mark.parametrize("name", list(KINDS))
def test_the_config_class_implements_the_kind_interface(name):
    cls = kind_config(name)
    for method in MUST_IMPLEMENT:
        assert getattr(cls, method) is not getattr(PipelineConfig, method), f"{name} must implement {method}"
    assert cls.ROLES and all(isinstance(spec, RoleSpec) for spec in cls.ROLES)
    hints = typing.get_type_hints(cls)
    for spec in cls.ROLES:  # one field per role, a WorkerConfig block (or a kind's extension of it, e.g. its data_args)
        types = typing.get_args(hints[spec.name]) or (hints[spec.name],)
        assert any(isinstance(t, type) and issubclass(t, WorkerConfig) for t in types), spec.name
        assert spec.capability in CAPABILITIES
        module, _, worker = spec.worker_cls.rpartition(".")
        assert hasattr(importlib.import_module(module), worker), spec.worker_cls
    assert cls.EPOCHS_ROLE is None or cls.EPOCHS_ROLE in cls.role_specs()
    fields = {field.name for field in dataclasses.fields(cls)}
    assert set(cls.DROPPABLE_MAPS) <= fields and set(cls.NAMED_ROLE_MAPS) <= fields
    for _, block in cls.DOC_SECTIONS:
        assert dataclasses.is_dataclass(block)


@pytest.mark.parametrize("name", list(KINDS))
def test_the_default_config_dry_runs(name, tmp_path, monkeypatch, capsys):
    """The launcher's embedded default, as `python examples/start_<kind>_pipeline.py --dry_run` (from an empty
    directory: no demo data there, so only the config is checked)."""
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location(f"start_{name}", ROOT / "examples" / f"start_{name}_pipeline.py")
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    assert launcher.main(["--dry_run"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    config = _default(kind_config(name))
    assert "resolved config:" in out and "placement on" in out
    for role in config.roles():  # every configured role is placed
        assert f"{role}[0]" in out, role
    for role in config.optimizer_steps():  # the LR schedule's steps of every trained role
        assert any(role in line and "optimizer steps" in line for line in out.splitlines()), role


def _default(cls):
    from roll.configs import compose_config, load_config

    return load_config(cls, compose_config(str(ROOT / "examples" / cls.DEFAULT_CONFIG[0]), cls.DEFAULT_CONFIG[1]))
