"""Acceptance: with `max_failures: 1`, a run whose actor_infer or actor_train worker is SIGKILLed mid-run
recovers on its own — roles torn down and restarted, the last complete checkpoint reloaded, the steps since
redone — and ends with the same metrics and weights as the uninterrupted run (checkpoint every step, fp32 on
CPU: exact equality). The recovery is logged and counted in `system/recoveries`.

One run (max_failures: 2) loses a worker of each model role in turn: actor_infer is killed at the end of
step 1 (step 1 is saved without it; step 2's generate finds it dead: redo step 2 from step-1), then
actor_train at the end of the redone step 2, before its save (the save fails half-way, leaving step-2.tmp:
redo steps 2 and 3 from step-1). A reward call that hangs in a run without checkpoints times out and the
run starts over.
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
from tests.pipeline.helpers import make_config, trained_weights

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

    config = make_config(small_demo, out, [f"max_steps={STEPS}", "save_steps=1", *overrides], blocks=blocks)
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
    kills = [KillWorker("actor_infer", at_step=0), KillWorker("actor_train", at_step=1)]
    killed = _run(small_demo, root / "killed", "max_failures=2", kills=kills)
    # the reward hangs once, in step 2, of a run that saves nothing (save_steps=0): the call times out after
    # rpc_timeout and the recovery starts over from step 1 with the driver state reset
    hang = {"fault": "hang", "at_call": 2, "marker": str(root / "hung_once")}
    scratch = _run(
        small_demo,
        root / "scratch",
        "save_steps=0",
        "max_failures=1",
        "rewards.math.rpc_timeout=4",
        blocks={
            "rewards": {"math": {"worker_cls": "tests.reliability.faulty.FaultyRewardWorker", "reward_args": hang}}
        },
    )
    return {"root": root, "full": full, "killed": killed, "timeout_no_checkpoint": scratch}


def _deterministic(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(NONDETERMINISTIC)}


@pytest.mark.parametrize("run", ["killed", "timeout_no_checkpoint"])
def test_a_killed_worker_is_recovered_and_the_run_matches_the_uninterrupted_one(runs, run):
    """("killed": actor_infer, then actor_train; "timeout_no_checkpoint": a reward call that hangs in step 2 of a
    run that saves nothing, which starts over.)"""
    full, recovered = runs["full"], runs[run]
    failures = 2 if run == "killed" else 1
    assert recovered["recoveries"] == failures and full["recoveries"] == 0
    assert sorted(recovered["steps"]) == list(range(STEPS))
    for step in range(STEPS):
        assert _deterministic(recovered["steps"][step]) == _deterministic(full["steps"][step]), f"step {step + 1}"
    assert recovered["steps"][STEPS - 1]["system/recoveries"] == failures
    weights, expected = recovered["weights"], full["weights"]
    assert weights.keys() == expected.keys()
    assert all(torch.equal(weights[name], expected[name]) for name in expected)
    if run == "timeout_no_checkpoint":
        assert not (runs["root"] / "scratch" / "checkpoints").exists()
        assert "recovery: no checkpoint saved yet: starting over from step 1" in recovered["log"]
        assert (
            "recovery 1 of max_failures=1: rewards.math.compute_rewards did not answer within 4.0 s" in recovered["log"]
        )
    else:  # each recovery names the role and method that failed
        assert "recovery 1 of max_failures=2: actor_infer.generate: worker rank 0 died" in recovered["log"]
        assert "recovery 2 of max_failures=2: actor_train." in recovered["log"]
        assert recovered["log"].count("resuming from the last complete checkpoint") == 2
    assert "recovery: roles restarted in" in recovered["log"]


def test_the_actor_train_kill_interrupted_a_save_which_was_redone(runs):
    root = checkpoint.checkpoint_root(str(runs["root"] / "killed"))
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-1", "step-2", "step-3"]
    for step in (1, 2, 3):
        checkpoint.verify(root / f"step-{step}")
