"""The two estimators with inputs beyond rewards run end to end: ReMax (a greedy rollout's reward as each
sample's baseline) and the optimal token baseline (per-token Σπ² from actor_train)."""

import pytest
import torch

from roll.pipeline.core.callbacks import StepCallback
from tests.pipeline.helpers import NO_REFERENCE

pytestmark = pytest.mark.usefixtures("ray_session")


class KeepBatch(StepCallback):  # test double: remembers each step's batch
    def __init__(self):
        self.batches = {}

    def on_step_end(self, step, batch, metrics):
        self.batches[step] = batch


def _run(rlvr_config, tmp_path, estimator):
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    keep = KeepBatch()
    config = rlvr_config(tmp_path / estimator, [f"adv_estimator={estimator}", "max_steps=2", NO_REFERENCE])
    with RLVRPipeline(config, callbacks=[keep]) as pipeline:
        history = pipeline.run()
    return history, keep.batches


def test_remax_subtracts_the_greedy_answers_reward(rlvr_config, tmp_path):
    history, batches = _run(rlvr_config, tmp_path, "remax")
    assert "timing/remax_baseline" in history["steps"][0]
    batch = batches[1]
    baselines, scores, mask = batch.batch["reward_baselines"], batch.batch["scores"], batch.batch["response_mask"]
    assert set(baselines.unique().tolist()) <= {0.0, 1.0}  # math-verify grades of the greedy answers
    per_prompt = baselines.view(-1, 4)  # 4 samples per prompt share one baseline
    assert torch.equal(per_prompt, per_prompt[:, :1].expand_as(per_prompt))
    # ReMax: advantage at the first token = return (the score, on the last token) − baseline
    assert torch.allclose(batch.batch["advantages"][:, 0], (scores - baselines) * mask[:, 0])


def test_optimal_token_baseline_gets_sum_pi_squared_from_the_trainer(rlvr_config, tmp_path):
    history, batches = _run(rlvr_config, tmp_path, "optimal_token_baseline")
    batch = batches[1]
    spi, mask = batch.batch["sum_pi_squared"], batch.batch["response_mask"]
    pi = batch.batch["old_log_probs"].exp()
    valid = mask.bool()
    # Σ_v π_v² lies in [π(token)², 1] for a distribution with π(token) among its entries
    assert (spi[valid] <= 1 + 1e-6).all() and (spi[valid] >= pi[valid] ** 2 - 1e-6).all()
    assert (spi[~valid] == 0).all()
    assert all(torch.isfinite(torch.tensor(m["actor/pg_loss"])) for m in history["steps"].values())
