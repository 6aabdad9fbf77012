"""Request-level rollout (generate_opt_level: 1, docs/async.md) on the demo, engine and trainer on separate
virtual devices, with async_generation_ratio 1 and partial_rollout. One 3-step pipeline: its engine is the
real hf_infer slowed by a sleep per forward pass (tests/pipeline/slow_engine.py), so a generate call outlasts a
training step and every weight sync finds requests in flight: they are aborted and resumed on the new
weights. actor_infer is SIGKILLed at the end of step 2 (max_failures: 1): step 3's requests find it dead,
the roles restart and step 3 is redone from the step-2 checkpoint.
"""

import io
import logging

import pytest
import torch

from roll.configs import ConfigError
from roll.pipeline.core.callbacks import StepCallback
from tests.pipeline.helpers import NO_REFERENCE
from tests.reliability.test_recovery import KillWorker

pytestmark = pytest.mark.usefixtures("ray_session")

STEPS, PROMPTS, GROUP, MAX_NEW = 3, 8, 4, 6  # MAX_NEW: the demo's response_length


class RecordBatches(StepCallback):
    """Per trained step: each sample's response length, whether it ends with EOS, and its policy lag."""

    def __init__(self, eos_token_id: int):
        self.eos, self.steps = eos_token_id, {}

    def on_step_end(self, step, batch, metrics) -> None:
        lengths = batch.batch["response_mask"].sum(dim=1).long()
        last = batch.batch["responses"].gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        self.steps[step] = {
            "lengths": lengths.tolist(),
            "eos": (last == self.eos).tolist(),
            "lag": [int(v) for v in batch.non_tensor_batch["policy_lag"]],
            "uids": list(batch.non_tensor_batch["uid"]),
            "rows": len(batch),
        }


@pytest.fixture(scope="module")
def run(rlvr_config, tmp_path_factory):
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    root = tmp_path_factory.mktemp("requests")
    config = rlvr_config(
        root / "run",
        [
            f"max_steps={STEPS}",
            "save_steps=1",
            NO_REFERENCE,
            "generate_opt_level=1",
            "async_generation_ratio=1",
            "partial_rollout=true",
            "max_failures=1",
            "actor_infer.worker_cls=tests.pipeline.slow_engine.SlowEngineWorker",
        ],
    )
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logging.getLogger("roll.pipeline").addHandler(handler)
    kill = KillWorker("actor_infer", at_step=1)
    try:
        with RLVRPipeline(config, callbacks=[kill]) as pipeline:
            record = RecordBatches(pipeline.tokenizer.eos_token_id)
            pipeline.callbacks.append(record)
            kill.pipeline = pipeline
            history = pipeline.run()
    finally:
        logging.getLogger("roll.pipeline").removeHandler(handler)
    history["log"], history["batches"] = log.getvalue(), record.steps
    return history


def test_requests_stream_to_rewards_and_partial_rollouts_resume_on_new_weights(run):
    steps = [run["steps"][s] for s in range(STEPS)]
    total = {key: sum(m[key] for m in steps) for key in steps[0] if key.startswith("async/")}
    # every weight sync found requests in flight: aborted, then resumed (their samples mix two versions)
    assert total["async/aborted_requests"] > 0 and total["async/resumed_requests"] > 0, total
    assert total["async/partial_samples"] > 0, total
    # finished groups were scored while other requests were still generating
    assert total["async/groups_scored_while_generating"] > 0, total
    for step, batch in run["batches"].items():
        assert batch["rows"] == PROMPTS * GROUP
        assert sorted(set(batch["uids"])) == sorted(f"{step}-{i}" for i in range(PROMPTS))
        # a resumed sample is whole: it ends with EOS or has all MAX_NEW tokens, never cut at the abort
        assert all(eos or length == MAX_NEW for eos, length in zip(batch["eos"], batch["lengths"])), batch
        assert max(batch["lag"]) <= 1
    assert run["batches"][0]["lag"] == [0] * PROMPTS * GROUP  # the first step is on-policy
    assert steps[1]["async/lag_max"] == 1.0
    lag1 = {k: v for k, v in steps[1].items() if k.startswith("mismatch/lag_1/")}
    assert lag1 and all(torch.isfinite(torch.tensor(v)) for v in lag1.values())


def test_killed_engine_fails_clearly_and_the_run_resumes_from_the_checkpoint(run):
    assert run["recoveries"] == 1
    assert "recovery 1 of max_failures=1: actor_infer.generate_requests: worker rank 0 died" in run["log"], run["log"]
    assert sorted(run["steps"]) == list(range(STEPS)) and run["first_step"] == 0
    assert run["steps"][2]["async/lag_max"] == 0.0  # redone from the step-2 checkpoint: nothing queued


def test_request_rollout_settings_are_checked(rlvr_config, tmp_path):
    with pytest.raises(ConfigError, match=r"'generate_opt_level' = 2: must be in \[0, 1\]"):
        rlvr_config(tmp_path, ["generate_opt_level=2"])
    with pytest.raises(ConfigError, match="'partial_rollout': true needs generate_opt_level: 1"):
        rlvr_config(tmp_path, ["partial_rollout=true", "async_generation_ratio=1"])
    with pytest.raises(ConfigError, match="'partial_rollout': true needs"):
        rlvr_config(tmp_path, ["partial_rollout=true", "generate_opt_level=1"])
