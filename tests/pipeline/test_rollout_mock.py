"""ROLL's rollout_mock end to end: the session's `uninterrupted_run` dumped its 4 steps' rollouts (mode dump);
a run with the same config in mode mock replays them without generating, and trains to the same numbers: every
metric of every step exactly equal, wall-clock ones aside. Also ROLL's rollout_dump_dir log the dump run wrote.
One extra pipeline run of 4 steps (the dump run is shared)."""

import json
import pickle

import pytest

from tests.pipeline.helpers import run_pipeline, uninterrupted_overrides

VOLATILE = ("timing/", "time/", "seconds", "perf/", "throughput", "memory/", "system/")  # wall clock, machine


def _stable(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not any(part in k for part in VOLATILE)}


def test_replayed_rollouts_train_to_the_same_metrics(rlvr_config, ray_session, uninterrupted_run, tmp_path):
    dumps = uninterrupted_run["dumps"]
    assert sorted(p.name for p in (dumps / "train").iterdir()) == [f"step_{s:06d}.pkl" for s in range(4)]
    replay = run_pipeline(rlvr_config(tmp_path / "out", uninterrupted_overrides(dumps, "mock")))
    dumped = uninterrupted_run["history"]["steps"]
    assert sorted(replay["steps"]) == sorted(dumped) == [0, 1, 2, 3]
    different = {}
    for step in range(4):
        ours, theirs = _stable(replay["steps"][step]), _stable(dumped[step])
        assert ours.keys() == theirs.keys(), step
        different.update({(step, k): (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]})
    assert not different
    assert any(k.startswith("actor/") or "loss" in k for k in _stable(dumped[0]))  # training metrics compared


def test_rollout_dump_dir_logs_rolls_columns(uninterrupted_run):
    with open(uninterrupted_run["dumps"] / "train" / "step_000001.pkl", "rb") as handle:
        taken = pickle.load(handle)
    log = json.loads((uninterrupted_run["rollout_log"] / "rollout_dump_data.step_1.jsonl").read_text())
    assert log["global_step"] == [1] * len(taken.batch)
    assert log["scores"] == pytest.approx(taken.batch.batch["scores"].tolist())
    assert log["prompt"] == list(taken.batch.non_tensor_batch["prompt_text"])
    assert log["responses"] == list(taken.batch.non_tensor_batch["response_text"])
