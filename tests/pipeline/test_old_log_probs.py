"""Old log-probs from the rollout engine (use_rollout_log_probs, roll/pipeline/core/old_log_probs.py), without Ray:
hf_infer's float32 rollout log-probs against the recomputed ones, and the per-step choice. The pipeline runs
(pass skipped, resumed runs) are checked on the session's uninterrupted run in tests/pipeline/test_resume.py."""

import dataclasses

import numpy as np
import pytest
import torch

from roll.distributed.data_proto import DataProto
from roll.pipeline.core.old_log_probs import MAX_ABS_DIFF, MAX_DIFF, REUSED, OldLogProbs, exactness_blockers
from tests.configs.test_config import tiny as load
from tests.strategies import harness as h


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    """A sampled hf_infer float32 batch of the tiny model (rollout log-probs included) and the same rows'
    log-probs recomputed by the scoring forward actor_train uses (hf_logits, one full forward per row)."""
    from roll.configs.worker import GeneratingArgs
    from roll.strategies import create_strategy

    model_dir, data_file = h.prepare(tmp_path_factory.mktemp("old_log_probs"))
    tensors = torch.load(data_file)[0]
    config = dataclasses.replace(
        h.make_worker_config(model_dir, "hf_infer", None, 1, 1, 1),
        generating_args=GeneratingArgs(max_new_tokens=8, num_return_sequences=4),
    )
    engine = create_strategy("hf_infer", h.StandInWorker(config, 0, 1))
    engine.initialize()
    prompts = DataProto.from_dict(
        tensors={"prompts": tensors["prompts"][:6], "attention_mask": tensors["prompts"][:6].ne(0).long()},
        meta_info={"seed": 3},
    )
    batch = engine.generate(prompts, {})
    batch.meta_info["temperature"] = 1.0
    recomputed = engine.compute_log_probs(batch)
    return batch, recomputed


def test_hf_infer_float32_rollout_log_probs_equal_the_recomputed_ones(sampled):
    batch, recomputed = sampled
    mask = batch.batch["response_mask"].bool()
    assert mask.sum() > 20  # sampled tokens to compare
    diff = (batch.batch["rollout_log_probs"] - recomputed).abs()[mask]
    assert diff.max() < 1e-5 < MAX_ABS_DIFF  # KV-cached decode vs one full forward: float32 rounding only
    # what the pipeline does with them: measured equal on the first step, reused from then on, pass skipped
    choice = OldLogProbs(load(), rows_are_samples=True)
    assert choice.needs_pass(batch)
    batch.batch["old_log_probs"] = recomputed
    metrics = choice.settle(batch)
    assert metrics[REUSED] == 1.0 and metrics[MAX_DIFF] == pytest.approx(float(diff.max()))
    assert torch.equal(batch.batch["old_log_probs"], batch.batch["rollout_log_probs"] * batch.batch["response_mask"])
    del batch.batch["old_log_probs"]
    assert not choice.needs_pass(batch)  # the next step: no actor_train pass
    assert choice.settle(batch) == {REUSED: 1.0} and "old_log_probs" in batch.batch


def _batch(rollout, recomputed=None, lag=None) -> DataProto:
    mask = torch.ones_like(rollout)
    tensors = {"rollout_log_probs": rollout, "response_mask": mask}
    if recomputed is not None:
        tensors["old_log_probs"] = recomputed
    batch = DataProto.from_dict(tensors=tensors)
    if lag is not None:
        batch.non_tensor_batch["policy_lag"] = np.array(lag, dtype=object)
    return batch


def test_auto_refuses_rollout_log_probs_that_differ_and_keeps_recomputing():
    rollout = -torch.rand(4, 5)
    choice = OldLogProbs(load(), rows_are_samples=True)
    assert choice.needs_pass(_batch(rollout))
    far = _batch(rollout, recomputed=rollout + 1e-3)
    assert choice.settle(far) == {REUSED: 0.0, MAX_DIFF: pytest.approx(1e-3, rel=1e-3)}
    assert torch.equal(far.batch["old_log_probs"], rollout + 1e-3)  # the recomputed ones stay
    assert choice.needs_pass(_batch(rollout)) and choice.settle(_batch(rollout, rollout)) == {REUSED: 0.0}
    # a checkpoint keeps the refusal; a run that starts over measures again
    resumed = OldLogProbs(load(), rows_are_samples=True)
    resumed.load_state_dict(choice.state_dict())
    assert resumed.measured == choice.measured
    choice.reset()
    assert choice.measured is None


def test_auto_recomputes_off_policy_rows_and_where_the_setup_is_not_exact():
    rollout = -torch.rand(4, 5)
    choice = OldLogProbs(load(), rows_are_samples=True)
    choice.needs_pass(_batch(rollout))
    choice.settle(_batch(rollout, rollout))  # measured equal
    assert not choice.needs_pass(_batch(rollout, lag=[0, 0, 0, 0]))
    assert choice.needs_pass(_batch(rollout, lag=[0, 1, 0, 0]))  # a row sampled by older weights
    assert choice.settle(_batch(rollout, rollout + 0.5)) == {REUSED: 0.0}
    for overrides, why in (
        (["actor_infer.model_args.dtype=bfloat16"], "not float32 on both"),
        (["actor_infer.generating_args.top_p=0.9"], "top_k / top_p"),
        (["weight_sync_check=off"], "weight_sync_check is off"),
        (["rollout_is_threshold=2.0"], "rollout IS is on"),
        (["actor_train.model_args.lora_target=all-linear", "reference=null"], "LoRA"),
        (["actor_infer.generating_args.do_sample=false", "actor_infer.generating_args.temperature=0.7"], "greedy"),
    ):
        assert any(why in reason for reason in exactness_blockers(load(*overrides), True)), overrides
        assert OldLogProbs(load(*overrides), rows_are_samples=True).needs_pass(_batch(rollout))
    assert "not the engine's samples" in exactness_blockers(load(), rows_are_samples=False)[0]
    # a checkpoint's measurement made under another set-up does not count here
    other = OldLogProbs(load("actor_infer.generating_args.top_p=0.9"), rows_are_samples=True)
    other.load_state_dict(choice.state_dict())
    assert other.measured is None


def test_explicit_settings():
    rollout = -torch.rand(4, 5)
    never = OldLogProbs(load("use_rollout_log_probs=false"), rows_are_samples=True)
    assert never.needs_pass(_batch(rollout)) and never.settle(_batch(rollout, rollout)) == {REUSED: 0.0}
    always = OldLogProbs(load("use_rollout_log_probs=true"), rows_are_samples=False)
    assert always.needs_pass(_batch(rollout))  # the first step measures the mismatch ...
    first = _batch(rollout, rollout + 0.5)
    assert always.settle(first) == {REUSED: 1.0, MAX_DIFF: pytest.approx(0.5)}
    assert torch.equal(first.batch["old_log_probs"], rollout)  # ... and uses the rollout log-probs all the same
    assert not always.needs_pass(_batch(rollout, lag=[1, 2, 0, 0]))  # opt-in: off-policy rows too


def test_config_errors_name_the_key():
    from tests.configs.test_config import error_of

    assert "rollout_is_threshold" in error_of("use_rollout_log_probs=true", "rollout_is_threshold=2.0")
