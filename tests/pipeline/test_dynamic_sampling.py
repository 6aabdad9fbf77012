"""Dynamic sampling and a domain of several scorers end to end, on one started pipeline: rewards.math is
a weighted `\boxed{}` format scorer plus the math answer scorer (docs/reward_domains_multi.md); the group
filter runs on the driver, so each test switches query_filter_config / the refill keys on the running
pipeline's config."""

import logging

import numpy as np
import pytest
import torch

from roll.configs.worker import RewardFilterConfig
from roll.pipeline.core.callbacks import StepCallback
from roll.utils.progress import StepTimer
from tests.pipeline.helpers import NO_REFERENCE, make_config

pytestmark = pytest.mark.usefixtures("ray_session")
N, PROMPTS = 4, 8  # SMALL_RUN: num_return_sequences_in_group, rollout_batch_size


class KeepBatch(StepCallback):
    def on_step_end(self, step, batch, metrics):
        self.batch, self.metrics = batch, metrics


@pytest.fixture(scope="module")
def pipeline(demo_dir, tmp_path_factory):
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    scorers = [
        {"name": "format", "worker_cls": "roll.workers.rewards.format_rule.BoxedFormatRewardWorker", "weight": 0.25},
        {"name": "answer", "worker_cls": "roll.workers.rewards.math_rule.MathRuleRewardWorker"},
    ]
    config = make_config(
        demo_dir,
        tmp_path_factory.mktemp("dynsample"),
        ["max_steps=3", NO_REFERENCE, "rewards.math.worker_cls=null"],
        blocks={"rewards": {"math": {"scorers": scorers}}},
    )
    keep = KeepBatch()
    with RLVRPipeline(config, callbacks=[keep]) as started:
        started.kept = keep
        yield started


def set_filter(pipeline, type_="no_filter", refill=False, bound=16, **args):
    pipeline.config.rewards["math"].query_filter_config = RewardFilterConfig(type_, args)
    pipeline.config.is_use_additional_prompts, pipeline.config.max_additional_running_prompts = refill, bound
    pipeline.compose_rollout()  # the rollout mode is chosen from the config once: again after changing it


def sampled(pipeline, step):
    """sample_batch of `step` from the sampler's current position, which is restored afterwards."""
    state, metrics = pipeline.sampler.state_dict(), {}
    batch, rows, scoring = pipeline.sample_batch(step, StepTimer(), metrics)
    if scoring is not None:  # no filter: the plain rollout leaves the scoring to the pipeline's step
        scoring()
    pipeline.sampler.load_state_dict(state)
    return batch, rows, metrics


def test_keep_all_filter_is_bit_identical_to_no_filter(pipeline):
    set_filter(pipeline)
    plain, plain_rows, plain_metrics = sampled(pipeline, 5)
    set_filter(pipeline, "std_filter", refill=True, std_threshold=-1.0)  # the filtered path, keeping every group
    filtered, rows, metrics = sampled(pipeline, 5)
    assert not any(key.startswith("dynamic_sampling") for key in plain_metrics)
    assert metrics["dynamic_sampling/generation_rounds"] == 1 and metrics["dynamic_sampling/extra_prompts"] == 0
    assert rows == plain_rows
    assert set(filtered.batch) == set(plain.batch)
    for key in plain.batch:
        assert torch.equal(filtered.batch[key], plain.batch[key]), key
    for key in plain.non_tensor_batch:
        assert (filtered.non_tensor_batch[key] == plain.non_tensor_batch[key]).all(), key


def test_filter_on_no_all_equal_group_reaches_the_loss_and_batch_is_exact(pipeline):
    set_filter(pipeline, "std_filter", refill=True, bound=64, std_threshold=0.0)
    metrics = pipeline.step(0)
    batch = pipeline.kept.batch  # the batch the update trained on
    assert len(batch) == PROMPTS * N
    scores = batch.batch["scores"].view(PROMPTS, N)
    assert (scores.std(dim=1) > 0).all(), scores  # no all-equal group
    uids = batch.non_tensor_batch["uid"].reshape(PROMPTS, N)
    assert (uids == uids[:, :1]).all() and len(set(uids[:, 0])) == PROMPTS  # one uid per group
    kept, dropped = metrics["dynamic_sampling/math/groups_kept"], metrics["dynamic_sampling/math/groups_dropped"]
    assert kept >= PROMPTS and kept + dropped == PROMPTS + metrics["dynamic_sampling/extra_prompts"]
    assert metrics["dynamic_sampling/backfilled_groups"] == 0
    assert metrics["dynamic_sampling/generation_rounds"] >= 1
    assert np.isfinite(metrics["actor/pg_loss"])


def test_refill_stops_at_its_bound_with_a_log_line(pipeline):
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("roll.pipeline").addHandler(handler)
    try:
        set_filter(pipeline, "mean_filter", refill=True, bound=3, threshold_down=2.0)  # drops every group
        batch, _, metrics = sampled(pipeline, 7)
    finally:
        logging.getLogger("roll.pipeline").removeHandler(handler)
        set_filter(pipeline)
    assert len(batch) == PROMPTS * N  # completed with dropped groups
    assert metrics["dynamic_sampling/extra_prompts"] == 3
    assert metrics["dynamic_sampling/math/groups_dropped"] == PROMPTS + 3
    assert metrics["dynamic_sampling/backfilled_groups"] == PROMPTS
    (line,) = [r.getMessage() for r in records if "dynamic sampling" in r.getMessage()]
    assert "max_additional_running_prompts=3 is spent" in line and "0 of 8 groups passed" in line, line


def test_scorers_are_scored_logged_and_summed_with_their_weights(pipeline):
    from roll.utils.math_grader import grade_math
    from roll.workers.rewards.format_rule import has_boxed_answer

    set_filter(pipeline)
    batch, _, _ = sampled(pipeline, 9)
    texts, truths = batch.non_tensor_batch["response_text"], batch.non_tensor_batch["ground_truth"]
    fmt = torch.tensor([float(has_boxed_answer(t)) for t in texts])
    answer = torch.tensor([float(grade_math(t, g)) for t, g in zip(texts, truths)])
    assert torch.equal(batch.batch["scores/math/format"], fmt)
    assert torch.equal(batch.batch["scores/math/answer"], answer)
    assert torch.allclose(batch.batch["scores"], 0.25 * fmt + answer)
    assert fmt.sum() > 0 and answer.sum() > 0, (fmt, answer)  # both scorers see real, non-zero scores
    metrics = pipeline.reward_failures(batch)
    assert metrics["reward/math/format"] == pytest.approx(fmt.mean().item())
    assert metrics["reward/math/answer"] == pytest.approx(answer.mean().item())
    assert {"reward/math/errors", "reward/math/timeouts"} <= set(metrics)
    assert "rewards.math.format" in pipeline.clusters and "rewards.math" not in pipeline.clusters
