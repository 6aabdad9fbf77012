"""exp_name names the run: TensorBoard writes to <logging_dir>/<exp_name>/, so runs compare under one logdir."""

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

from roll.configs import ConfigError, compose_config
from roll.pipeline.rlvr.config import load_rlvr_config
from roll.utils.tracking import Tracker

TINY = Path(__file__).resolve().parents[2] / "examples" / "tiny_rlvr"


def tiny(*overrides):
    return load_rlvr_config(compose_config(str(TINY), "rlvr_tiny", list(overrides)))


def test_runs_with_different_exp_names_are_separate_tensorboard_runs(tmp_path):
    for name, score in (("grpo", 0.25), ("ppo", 0.75)):
        tracker = Tracker.from_config(tiny(f"exp_name={name}", f"output_dir={tmp_path}"))
        tracker.log({"val/score/all": score}, 0)
        tracker.close()
    root = tmp_path / "tensorboard"
    assert not list(root.glob("events.*"))  # nothing directly in the logdir: every run has its directory
    runs = EventMultiplexer().AddRunsFromDirectory(str(root))  # what `tensorboard --logdir <root>` shows
    runs.Reload()
    assert sorted(runs.Runs()) == ["grpo", "ppo"]
    assert [event.value for event in runs.Scalars("ppo", "val/score/all")] == [0.75]


def test_exp_name_and_logging_dir_place_the_run():
    config = tiny("logging_dir=/tmp/board", "exp_name=qwen/grpo-lr1e-6")
    assert Tracker("stdout", config.tensorboard_dir, config.exp_name).run_dir == "/tmp/board/qwen/grpo-lr1e-6"
    assert Tracker.from_config(tiny("track_with=stdout")).run_dir == "./output/tiny_rlvr/tensorboard/tiny_rlvr"


@pytest.mark.parametrize("name", ["", "/abs", "../elsewhere"])
def test_exp_name_must_stay_under_the_logging_dir(name):
    with pytest.raises(ConfigError, match="'exp_name'"):
        tiny(f"exp_name={name!r}" if name else "exp_name=''")
