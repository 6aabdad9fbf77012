"""A first environment prompt longer than prompt_length (issue 31: the calculator's ~151 tokens with
prompt_length 128) is refused naming the tag — by --dry_run where the model is on disk, and by the pipeline
before Ray starts — instead of a tensor-size error from left_pad while the pipeline is built. The shipped
calculator config passes."""

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def launcher():
    spec = importlib.util.spec_from_file_location("agentic_launcher", EXAMPLES / "start_agentic_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_names_the_tag_whose_first_prompt_is_too_long(agentic_model, capsys):
    main = launcher().main
    args = ["--config_name", "calculator_traj", "--dry_run", f"model_path={agentic_model}"]
    assert main(args) == 0, capsys.readouterr().err  # the shipped calculator config fits
    capsys.readouterr()
    assert main([*args, "prompt_length=128"]) == 2
    err = capsys.readouterr().err
    assert "custom_envs.Calculator: the first prompt has 15" in err and "prompt_length = 128" in err
    assert "train_env_manager's tag 'Calculator'" in err


def test_the_pipeline_refuses_it_before_ray_starts(agentic_model, monkeypatch, tmp_path):
    from roll.configs import ConfigError, compose_config
    from roll.pipeline import base
    from roll.pipeline.agentic.config import load_agentic_config
    from roll.pipeline.agentic.pipeline import AgenticPipeline

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(base, "init_ray", no_ray)
    overrides = [f"model_path={agentic_model}", "prompt_length=128", f"output_dir={tmp_path}"]
    config = load_agentic_config(compose_config(str(EXAMPLES / "agentic_demo"), "calculator_traj", overrides))
    with pytest.raises(ConfigError, match=r"custom_envs\.Calculator: the first prompt has 1\d\d tokens"):
        AgenticPipeline(config)
