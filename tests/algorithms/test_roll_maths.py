"""Maths that must equal ROLL's (issue 34), each on hand-computed numbers with ROLL's formula cited from its
source (alibaba/ROLL: file, function). Each test failed before the fix."""

import dataclasses
import math

import numpy as np
import torch

from roll.algorithms import PolicyLossConfig, agg_loss, get_policy_loss_fn, reward_norm, sample_level_mask
from roll.configs.algorithm import RLAlgorithmConfig
from roll.distributed.data_proto import DataProto
from roll.pipeline.core import step_maths
from roll.utils.functional import scores_on_last_token
from roll.workers.actor_worker import ActorWorker
from tests.workers.test_loss_settings import settings


def _batch(scores, lengths, uid, width=4):
    scores, lengths = torch.tensor(scores), torch.tensor(lengths)
    mask = (torch.arange(width).expand(len(lengths), width) < lengths.unsqueeze(-1)).float()
    tensors = {"scores": scores, "token_level_scores": scores_on_last_token(scores, mask), "response_mask": mask}
    return DataProto.from_dict(tensors, {"uid": np.array(uid, dtype=object)})


def _step(batch, **keys):
    config = dataclasses.replace(RLAlgorithmConfig(), adv_estimator="reinforce", **keys)
    step_maths.apply_reward_shaping(batch, config)
    step_maths.apply_reward_kl(batch, config, None)
    step_maths.compute_advantages(batch, config)
    return batch.batch


def test_difficulty_mask_keeps_every_sample_with_one_sample_per_prompt():
    """roll/utils/functionals.py difficulty_mask: n_sample ≤ 1 → ones_like(scores); get_sample_level_mask
    multiplies it into the final mask. Scores 0 and 1 (the ones a group-of-one mean would drop) stay."""
    scores, lengths, uid = [0.0, 1.0, 0.5], [2, 3, 1], ["p", "q", "r"]
    kept = sample_level_mask(torch.tensor(scores), torch.tensor(lengths), 4, uid, difficulty_mask=True)
    assert kept.tolist() == [1.0, 1.0, 1.0]
    # combined with max_len_mask (length 4 = width): only the truncated sample leaves
    both = sample_level_mask(torch.tensor(scores), torch.tensor([4, 3, 1]), 4, uid, max_len_mask=True,
                             difficulty_mask=True)  # fmt: skip
    assert both.tolist() == [0.0, 1.0, 1.0]
    batch = _batch(scores, lengths, uid)
    before = batch.batch["response_mask"].clone()
    out = _step(batch, difficulty_mask=True)
    assert torch.equal(out["response_mask"], before)


def test_score_normalisation_gives_zero_on_a_degenerate_group():
    """roll/pipeline/agentic/utils.py agentic_reward_norm: (x − mean)/(std + 1e-6) only if the group has more
    than one row and |std| > 1e-6, else 0. batch mean + group std: r = (1, 3 | 4, 4 | 5), batch mean 17/5."""
    r = torch.tensor([1.0, 3.0, 4.0, 4.0, 5.0])
    uid = ["p", "p", "q", "q", "s"]
    mean, std_p = 17 / 5, math.sqrt(2.0)  # p: (1, 3), unbiased std √2; q constant; s a single row
    expected = torch.tensor([(1 - mean) / (std_p + 1e-6), (3 - mean) / (std_p + 1e-6), 0.0, 0.0, 0.0])
    torch.testing.assert_close(reward_norm(r, uid, "batch", "group"), expected)
    torch.testing.assert_close(reward_norm(r, uid, None, "group")[2:], torch.zeros(3))
    torch.testing.assert_close(reward_norm(torch.tensor([2.0, 2.0]), ["a", "b"], "batch", "batch"), torch.zeros(2))
    # the pipeline step: norm keys and use_reward_scaling on a constant batch never reach 1e6
    out = _step(_batch([1.0, 1.0, 1.0], [1, 2, 3], ["a", "b", "c"]), norm_mean_type="batch", norm_std_type="group")
    assert out["token_level_scores"].abs().max() == 0
    out = _step(_batch([1.0, 1.0, 1.0], [1, 2, 3], ["a", "b", "c"]), use_reward_scaling=True)
    assert out["token_level_scores"].abs().max() == 0


def test_length_loss_weights_use_the_lengths_before_the_sample_mask():
    """roll/pipeline/rlvr/actor_worker.py ActorWorker.compute_sample_weights(data, response_mask): the
    response_mask, not final_response_mask: ℓ = (1, 3, 2, 4) for all rows although prompt b is dropped.
    w = 1.5 − (ℓ − 1)/3 = (1.5, 0.833, 1.167, 0.5), Σw = 4 = B, so no renormalisation."""
    batch = _batch([1.0, 0.5, 1.0, 1.0], [1, 3, 2, 4], ["a", "a", "b", "b"])  # b's mean 1: dropped
    out = _step(batch, difficulty_mask=True, length_loss_weight=True)
    assert out["response_mask"][2:].sum() == 0
    expected = torch.tensor([[1.5, 0, 0, 0], [0.5 * 5 / 6] * 3 + [0]])
    torch.testing.assert_close(out["advantages"][:2], expected)
    assert "sample_loss_weights" not in out  # driver-side only


def test_weighted_advantages_equal_roll_weighted_loss_rows():
    """roll/pipeline/rlvr/actor_worker.py ActorWorker.loss_func: L = −min(ρA, clip(ρ)A), for A < 0
    L = −max(−L, (1 + 2·pg_clip)·A), then roll/utils/functionals.py agg_loss(L, mask, "token-mean", weights=w)
    = Σ L·w_row / Σ mask. roll multiplies A by w instead; for w > 0 loss and gradient agree."""
    torch.manual_seed(0)
    old = -torch.rand(3, 4)
    lp = (old + 0.3 * torch.randn(3, 4)).requires_grad_()
    adv = torch.randn(3, 4)
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])  # row 2 dropped by a sample mask
    w = torch.tensor([1.5, 0.25, 1.25])
    ours, _ = get_policy_loss_fn("vanilla")(
        old, lp, adv * w.unsqueeze(-1), mask, "token-mean", PolicyLossConfig(clip_ratio_c=1 + 2 * 0.2)
    )
    ratio = torch.exp(lp - old)
    loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    loss = torch.where(adv < 0, -torch.max(-loss, 1.4 * adv), loss)
    roll = (loss * mask * w.unsqueeze(-1)).sum() / mask.sum()  # ROLL's A is 0 off its mask, so is L
    (grad_ours,) = torch.autograd.grad(ours, lp)
    (grad_roll,) = torch.autograd.grad(roll, lp)
    torch.testing.assert_close(ours, roll, rtol=0, atol=1e-6)
    torch.testing.assert_close(grad_ours, grad_roll, rtol=0, atol=1e-7)


def test_segment_ratio_is_one_ratio_per_turn():
    """roll/pipeline/agentic/utils.py compute_segment_masked_mean: each maximal run of 1s in the mask gets the
    mean of the log-ratio over the run (Σ/(n + 1e-8)); agentic_actor_worker.py ActorWorker.loss_func (ratio_type
    segment) then uses exp(it) in the clipped PPO surrogate."""
    old = torch.zeros(1, 5)
    lp = torch.tensor([[0.2, 0.4, 3.0, -0.3, 0.1]], requires_grad=True)  # the 3.0 sits between turns (masked)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0]])
    adv = torch.ones(1, 5)
    config = PolicyLossConfig(clip_ratio_low=0.2, clip_ratio_high=0.2, importance_sampling="segment")
    loss, metrics = get_policy_loss_fn("vanilla")(old, lp, adv, mask, "token-mean", config)
    # turn 1: mean 0.3 → ρ = e^0.3 ≈ 1.35 > 1.2, clipped: −1.2 per token; turn 2: mean −0.1 → −e^−0.1 per token
    r2 = math.exp(-0.1)
    torch.testing.assert_close(loss, torch.tensor((-1.2 * 2 - r2 * 2) / 4))
    (grad,) = torch.autograd.grad(loss, lp)
    # d/d lp_t of −2·exp(mean)/4 over turn 2 = −exp(−0.1)/4 on each of its tokens; turn 1 is clipped (0)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0, 0.0, -r2 / 4, -r2 / 4]]))
    assert metrics["pg_clipfrac"] == 0.5  # the two tokens of turn 1
    # one turn = one sequence: segment equals seq
    seq = dataclasses.replace(config, importance_sampling="seq")
    one_turn = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0]])
    a, _ = get_policy_loss_fn("vanilla")(old, lp, adv, one_turn, "token-mean", config)
    b, _ = get_policy_loss_fn("vanilla")(old, lp, adv, one_turn, "token-mean", seq)
    torch.testing.assert_close(a, b)


def test_rl_loss_coef_scales_the_policy_and_kl_terms_not_the_entropy():
    """roll/pipeline/rlvr/actor_worker.py ActorWorker.loss_func: total = (pg + kl_loss_coef·kl)·rl_loss_coef,
    then total −= entropy_loss_coef·entropy."""
    torch.manual_seed(1)
    responses = torch.randint(0, 6, (2, 3))
    micro = DataProto.from_dict(
        {
            "responses": responses,
            "response_mask": torch.tensor([[1.0, 1, 1], [1, 1, 0]]),
            "old_log_probs": -torch.rand(2, 3),
            "ref_log_probs": -torch.rand(2, 3),
            "advantages": torch.randn(2, 3),
        }
    )
    logits = torch.randn(2, 4, 6)  # the full sequence: slice_response_logits takes positions 0..2
    common = dict(use_kl_loss=True, kl_loss_coef=0.3, entropy_loss_coef=0.05)
    settings(rl_loss_coef=0.5, **common).attach(micro)
    loss, metrics = ActorWorker._policy_loss(None, micro, logits)
    pg, kl, entropy = metrics["actor/pg_loss"], metrics["actor/kl_loss"], metrics["actor/entropy"]
    torch.testing.assert_close(loss.item(), 0.5 * (pg + 0.3 * kl) - 0.05 * entropy, rtol=0, atol=1e-6)
    settings(**common).attach(micro)  # default 1: the loss as before the key existed
    unscaled, _ = ActorWorker._policy_loss(None, micro, logits)
    torch.testing.assert_close(unscaled.item(), pg + 0.3 * kl - 0.05 * entropy, rtol=0, atol=1e-6)


def test_agg_loss_reproduces_roll_divisor_with_global_batch_size():
    """roll/utils/functionals.py agg_loss without counts divides seq-mean modes by all B rows (empty ones too);
    roll divides by the non-empty rows unless global_batch_size says otherwise (docs/roll_compatibility.md)."""
    loss = torch.tensor([[1.0, 2.0], [3.0, 0.0], [5.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == (3 + 3) / 2
    assert agg_loss(loss, mask, "seq-mean-token-sum", global_batch_size=3).item() == (3 + 3) / 3
