"""track_with: wandb | swanlab log a real run in their offline modes (no network): a tiny fake loop of the
Tracker, then the run file on disk must hold the logged metric."""

import time
from pathlib import Path

import pytest

from roll.configs import ConfigError
from roll.pipeline.rlvr.config import load_rlvr_config
from roll.utils.tracking import Tracker


@pytest.mark.parametrize(
    "sink,pattern", [("wandb", "wandb/offline-run-*/run-*.wandb"), ("swanlab", "run-*/run-*.swanlab")]
)
def test_offline_run_holds_the_logged_metrics(tmp_path, monkeypatch, sink, pattern):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    tracker = Tracker(sink, str(tmp_path), "tiny", {"project": "roll-test"})
    for step in range(3):
        tracker.log({"reward/mean_probe": 0.25 * step}, step)
    tracker.close()
    if sink == "wandb":
        import wandb

        wandb.teardown()  # stop wandb's background writer so the run file is complete
    files = list((tmp_path / "tiny").glob(pattern))
    assert len(files) == 1, sorted(str(p) for p in Path(tmp_path).rglob("*"))
    deadline = time.monotonic() + 20
    while b"reward/mean_probe" not in files[0].read_bytes():
        assert time.monotonic() < deadline, f"{files[0]} never received the logged metric"
        time.sleep(0.2)


def test_tracker_kwargs_are_checked_against_the_tracker():
    data = {
        "track_with": "tensorboard",
        "tracker_kwargs": {"project": "x"},
        "actor_train": {
            "model_args": {"model_name_or_path": "/m"},
            "data_args": {"file_name": "t.json"},
            "strategy_args": {"strategy_name": "deepspeed_train"},
            "device_mapping": [0],
        },
        "actor_infer": {
            "model_args": {"model_name_or_path": "/m"},
            "strategy_args": {"strategy_name": "hf_infer"},
            "device_mapping": [0],
        },
        "rewards": {"math": {"worker_cls": "roll.workers.rewards.math_rule.MathRuleRewardWorker"}},
    }
    with pytest.raises(ConfigError, match=r"'tracker_kwargs' has \['project'\], which TensorBoard's SummaryWriter"):
        load_rlvr_config(data)
    with pytest.raises(ConfigError, match="track_with = 'stdout' reads none"):
        load_rlvr_config({**data, "track_with": "stdout"})


def test_tensorboard_log_dir_is_roll_s_run_folder(tmp_path):
    """ROLL's tracker_kwargs.log_dir: the events go to that folder itself."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    target = tmp_path / "tb" / "roll_exp"
    tracker = Tracker("tensorboard", str(tmp_path / "unused"), "tiny", {"log_dir": str(target), "flush_secs": 1})
    tracker.log({"reward/mean": 0.5}, 3)
    tracker.close()
    events = EventAccumulator(str(target))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward/mean")] == [(3, 0.5)]
    assert not (tmp_path / "unused").exists()
