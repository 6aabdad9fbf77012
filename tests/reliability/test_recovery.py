"""Acceptance: with `max_failures` > 0, a run whose actor_infer or actor_train worker is SIGKILLed mid-run
recovers on its own — roles torn down and restarted, the last complete checkpoint reloaded, the steps since
redone — and ends with the same metrics and weights as the uninterrupted run (checkpoint every step, fp32 on
CPU: exact equality). The recovery is logged and counted in `system/recoveries`.

One run (max_failures: 3) meets three failures in turn: its reward call hangs in step 1, before any
checkpoint exists (the call times out after rpc_timeout and the run starts over); then actor_infer is killed
at the end of step 1 (step 1 is saved without it; step 2's generate finds it dead: redo step 2 from step-1);
then actor_train at the end of the redone step 2, before its save (the save fails half-way, leaving
step-2.tmp: redo steps 2 and 3 from step-1).
"""

import io
import logging
import os
import signal

import pytest
import ray
import torch

from roll.pipeline.core.callbacks import StepCallback
from roll.utils import checkpoint
from tests.pipeline.helpers import NO_REFERENCE, make_config, trained_weights

pytestmark = pytest.mark.usefixtures("ray_for_module")
STEPS = 3
NONDETERMINISTIC = ("timing/", "weight_sync/seconds", "system/recoveries")


class KillWorker(StepCallback):
    """SIGKILLs rank 0 of `role` once, at the end of 0-based step `at_step`."""

    def __init__(self, role: str, at_step: int):
        self.role, self.at_step, self.pipeline, self.killed_pid = role, at_step, None, None

    def on_step_end(self, step, batch, metrics) -> None:
        if step != self.at_step or self.killed_pid is not None:
            return
        worker = self.pipeline.clusters[self.role].workers[0]
        self.killed_pid = ray.get(worker.describe_placement.remote())["pid"]
        os.kill(self.killed_pid, signal.SIGKILL)


def _run(small_demo, out, *overrides, kills: list[KillWorker] = (), blocks=None) -> dict:
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    config = make_config(
        small_demo, out, [f"max_steps={STEPS}", "save_steps=1", NO_REFERENCE, *overrides], blocks=blocks
    )
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logging.getLogger("roll.pipeline").addHandler(handler)
    try:
        with RLVRPipeline(config, callbacks=list(kills)) as pipeline:
            for kill in kills:
                kill.pipeline = pipeline
            history = pipeline.run()
            history["weights"] = trained_weights(pipeline)
    finally:
        logging.getLogger("roll.pipeline").removeHandler(handler)
    history["log"] = log.getvalue()
    return history


@pytest.fixture(scope="module")
def runs(small_demo, tmp_path_factory):
    root = tmp_path_factory.mktemp("recovery")
    full = _run(small_demo, root / "full")
    # the reward hangs once, in step 1 of the first attempt (nothing saved yet), then the kills
    hang = {"fault": "hang", "at_call": 1, "marker": str(root / "hung_once")}
    kills = [KillWorker("actor_infer", at_step=0), KillWorker("actor_train", at_step=1)]
    recovered = _run(
        small_demo,
        root / "killed",
        "max_failures=3",
        "rewards.math.rpc_timeout=4",
        kills=kills,
        blocks={
            "rewards": {"math": {"worker_cls": "tests.reliability.faulty.FaultyRewardWorker", "reward_args": hang}}
        },
    )
    return {"root": root, "full": full, "killed": recovered}


def _deterministic(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(NONDETERMINISTIC)}


def test_killed_workers_and_a_hung_call_are_recovered_and_the_run_matches_the_uninterrupted_one(runs):
    full, recovered = runs["full"], runs["killed"]
    assert recovered["recoveries"] == 3 and full["recoveries"] == 0
    assert sorted(recovered["steps"]) == list(range(STEPS))
    for step in range(STEPS):
        assert _deterministic(recovered["steps"][step]) == _deterministic(full["steps"][step]), f"step {step + 1}"
    assert recovered["steps"][STEPS - 1]["system/recoveries"] == 3
    weights, expected = recovered["weights"], full["weights"]
    assert weights.keys() == expected.keys()
    assert all(torch.equal(weights[name], expected[name]) for name in expected)
    log = recovered["log"]  # each recovery names the role and method that failed
    assert "recovery 1 of max_failures=3: rewards.math.compute_rewards did not answer within 4.0 s" in log
    assert "recovery: no checkpoint saved yet: starting over from step 1" in log
    assert "recovery 2 of max_failures=3: actor_infer.generate: worker rank 0 died" in log
    assert "recovery 3 of max_failures=3: actor_train." in log
    assert log.count("recovery: roles restarted in") == 3


def test_the_actor_train_kill_interrupted_a_save_which_was_redone(runs):
    root = checkpoint.checkpoint_root(str(runs["root"] / "killed"))
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-1", "step-2", "step-3"]
    for step in (1, 2, 3):
        checkpoint.verify(root / f"step-{step}")
