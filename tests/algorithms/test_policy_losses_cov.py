"""clip_cov, kl_cov and geo_mean (docs/algorithms.md §5.4–5.6, §9.12–9.13)."""

import math

import pytest
import torch

from roll.algorithms import (
    PolicyLossConfig,
    compute_policy_loss_clip_cov,
    compute_policy_loss_geo_mean,
    compute_policy_loss_kl_cov,
)
from tests.algorithms import plain_reference as ref

ADV = [[2.0, 2.0, -1.5, 0.5], [-2.0, 1.0, 3.0, -1.0]]
OLD = [[-1.0, -0.5, -3.0, -1.0], [-0.2, -2.5, 0.0, -1.0]]
DELTA = [[0.05, 0.5, -0.1, 0.0], [0.1, -0.1, 0.02, 0.3]]
MASK = [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]]
LP = [[o + d for o, d in zip(orow, drow)] for orow, drow in zip(OLD, DELTA)]


def tensors(delta=DELTA, adv=ADV, mask=MASK, old=OLD):
    old_t = torch.tensor(old, dtype=torch.float64)
    lp = (old_t + torch.tensor(delta, dtype=torch.float64)).requires_grad_(True)
    return old_t, lp, torch.tensor(adv, dtype=torch.float64), torch.tensor(mask, dtype=torch.float64)


def positions():
    return [(i, j) for i in range(len(MASK)) for j in range(len(MASK[0]))]


# ---------------------------------------------------------------- clip_cov


def plain_clip_cov_parts(low=0.2, high=0.2, lb=1.0, ub=5.0):
    """Per-token max(L1, L2), the 'already clipped' flags and the candidate set."""
    a_bar, lp_bar = ref.masked_mean(ADV, MASK), ref.masked_mean(LP, MASK)
    losses, clipped, candidates = {}, {}, []
    for i, j in positions():
        a, r = ADV[i][j], math.exp(DELTA[i][j])
        l1, l2 = -a * r, -a * min(max(r, 1 - low), 1 + high)
        losses[i, j], clipped[i, j] = max(l1, l2), l2 > l1
        cov = (a - a_bar) * (LP[i][j] - lp_bar)
        if MASK[i][j] and not clipped[i, j] and lb < cov < ub:
            candidates.append((i, j))
    return losses, clipped, candidates


def plain_token_mean_without(losses, dropped):
    kept = [[0.0 if (i, j) in dropped else losses[i, j] for j in range(4)] for i in range(2)]
    return ref.token_mean(kept, MASK)


@pytest.mark.parametrize("lb, ub, expected", [(1.0, 5.0, [(0, 2), (1, 2)]), (1.0, 3.0, [(1, 2)]), (2.6, 5.0, [(0, 2)])])
def test_clip_cov_deterministic_when_k_covers_all_candidates(lb, ub, expected):
    config = PolicyLossConfig(clip_cov_ratio=1.0, clip_cov_lb=lb, clip_cov_ub=ub)
    losses, clipped, candidates = plain_clip_cov_parts(lb=lb, ub=ub)
    assert candidates == expected and clipped[0, 1]  # (0, 1) has cov 1.42 but is already clipped
    old, lp, adv, mask = tensors()
    loss, metrics = compute_policy_loss_clip_cov(old, lp, adv, mask, config=config)
    assert loss.item() == pytest.approx(plain_token_mean_without(losses, candidates), rel=1e-12)
    assert metrics == {
        "pg_clipfrac": pytest.approx(len(candidates) / 7),
        "pg_clipfrac_lower": 0.0,
        "ppo_kl": pytest.approx(ref.masked_mean([[-d for d in r] for r in DELTA], MASK)),
    }
    loss.backward()
    for i, j in candidates:
        assert lp.grad[i, j].item() == 0.0  # dropped tokens: no loss, no gradient
    assert lp.grad[0, 0].item() != 0.0


def test_clip_cov_random_subset_of_size_k():
    # k = max(⌊1e-4 · 7⌋, 1) = 1 of the 2 candidates, chosen at random
    losses, _, candidates = plain_clip_cov_parts()
    allowed = [pytest.approx(plain_token_mean_without(losses, [c]), rel=1e-12) for c in candidates]
    for _ in range(3):
        loss, metrics = compute_policy_loss_clip_cov(*tensors(), config=PolicyLossConfig(clip_cov_ratio=1e-4))
        assert metrics["pg_clipfrac"] == pytest.approx(1 / 7)
        assert loss.item() in allowed


def test_clip_cov_no_ratio_clamp_and_positive_ratio_required():
    with pytest.raises(ValueError):
        compute_policy_loss_clip_cov(*tensors(), config=PolicyLossConfig(clip_cov_ratio=0.0))
    delta = [[25.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    adv = [[-1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    loss, metrics = compute_policy_loss_clip_cov(*tensors(delta=delta, adv=adv))
    assert loss.item() == pytest.approx(math.exp(25.0) / 7, rel=1e-12)  # exp(25), not exp(20)
    assert metrics["ppo_kl"] == pytest.approx(-25.0 / (7 + 1e-8))


# ---------------------------------------------------------------- kl_cov


def plain_kl_cov(ratio, coef):
    valid = [(i, j) for i, j in positions() if MASK[i][j]]
    a_bar = sum(ADV[i][j] for i, j in valid) / len(valid)
    lp_bar = sum(LP[i][j] for i, j in valid) / len(valid)
    cov = {p: (ADV[p[0]][p[1]] - a_bar) * (LP[p[0]][p[1]] - lp_bar) for p in valid}
    k = max(1, int(len(valid) * ratio))
    top = sorted(valid, key=lambda p: cov[p], reverse=True)[:k]
    losses = [
        [-ADV[i][j] * math.exp(DELTA[i][j]) + (coef * abs(DELTA[i][j]) if (i, j) in top else 0.0) for j in range(4)]
        for i in range(2)
    ]
    return ref.token_mean(losses, MASK), top


@pytest.mark.parametrize(
    "config, ratio, coef",
    [
        (None, 0.0002, 0.1),
        (PolicyLossConfig(kl_cov_ratio=0.3), 0.3, 0.1),
        (PolicyLossConfig(kl_cov_ratio=0.3, ppo_kl_coef=None), 0.3, 1.0),
        ({"kl_cov_ratio": 0.5, "ppo_kl_coef": 2.0}, 0.5, 2.0),
    ],
)
def test_kl_cov_penalises_top_k_covariance_tokens(config, ratio, coef):
    want, top = plain_kl_cov(ratio, coef)
    assert len(top) == max(1, int(7 * ratio))
    loss, metrics = compute_policy_loss_kl_cov(*tensors(), config=config)
    assert loss.item() == pytest.approx(want, rel=1e-12)
    assert metrics == {
        "pg_clipfrac": 0.0,
        "pg_clipfrac_lower": 0.0,
        "ppo_kl": pytest.approx(ref.masked_mean([[abs(d) for d in r] for r in DELTA], MASK)),
    }


def test_kl_cov_has_no_clipping():
    delta = [[3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    adv = [[-1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    old, lp, a, m = tensors(delta=delta, adv=adv)
    loss, _ = compute_policy_loss_kl_cov(old, lp, a, m, config=PolicyLossConfig(ppo_kl_coef=0.0))
    assert loss.item() == pytest.approx(math.exp(3.0) / 7, rel=1e-12)
    loss.backward()
    assert lp.grad[0, 0].item() == pytest.approx(math.exp(3.0) / 7, rel=1e-12)


# ---------------------------------------------------------------- geo_mean

# A>0 δ>ε_high (clipped), A>0 δ<−ε_low (counted as clipped, value keeps δ), A<0 δ<−ε_low (clipped),
# A<0 δ>ε_high (kept), A=0 (δ* = 0); the third row is empty.
G_DELTA = [[0.5, -0.4, 0.1, 0.0], [-0.6, 0.7, 0.05, 3.0], [1.0, 1.0, 1.0, 1.0]]
G_ADV = [[1.0, 1.0, 1.0, 0.0], [-2.0, -2.0, -2.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
G_MASK = [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
G_OLD = [[-1.0] * 4, [-2.0] * 4, [-0.5] * 4]


def plain_geo_mean(low=0.2, high=0.2, weights=None):
    total, clip_pos, clip_neg = 0.0, [], []
    for i, (dr, ar, mr) in enumerate(zip(G_DELTA, G_ADV, G_MASK)):
        n = sum(mr)
        star = []
        for d, a in zip(dr, ar):
            dc = min(max(d, -low), high)
            star.append(min(d, dc) if a > 0 else max(d, dc) if a < 0 else 0.0)
        rho = math.exp(sum(s * m for s, m in zip(star, mr)) / (n + 1e-8))
        a_bar = sum(a * m for a, m in zip(ar, mr)) / (n + 1e-8)
        loss = -a_bar * rho
        if weights is not None:
            loss *= math.exp(sum(math.log(w + 1e-10) * m for w, m in zip(weights[i], mr)) / (n + 1e-8))
        total += loss
        clip_pos.append([float(d != min(max(d, -low), high) and a > 0) for d, a in zip(dr, ar)])
        clip_neg.append([float(d != min(max(d, -low), high) and a < 0) for d, a in zip(dr, ar)])
    return total / len(G_DELTA), ref.masked_mean(clip_pos, G_MASK), ref.masked_mean(clip_neg, G_MASK)


def test_geo_mean_value_metrics_and_plain_mean_over_all_rows():
    old, lp, adv, mask = tensors(G_DELTA, G_ADV, G_MASK, G_OLD)
    loss, metrics = compute_policy_loss_geo_mean(old, lp, adv, mask, loss_agg_mode="seq-mean-token-sum")
    want, clip_pos, clip_neg = plain_geo_mean()
    assert loss.item() == pytest.approx(want, rel=1e-12)  # divided by B = 3, the empty row included
    assert metrics == {
        "pg_clipfrac": pytest.approx(clip_pos),
        "pg_clipfrac_lower": pytest.approx(clip_neg),
        "ppo_kl": pytest.approx(ref.masked_mean([[-d for d in r] for r in G_DELTA], G_MASK)),
    }
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 7)


def test_geo_mean_gradient_zero_on_clipped_side_only():
    old, lp, adv, mask = tensors(G_DELTA, G_ADV, G_MASK, G_OLD)
    loss, _ = compute_policy_loss_geo_mean(old, lp, adv, mask)
    loss.backward()
    assert lp.grad[0, 0].item() == 0.0  # A>0, δ above ε_high: clipped
    assert lp.grad[0, 1].item() != 0.0  # A>0, δ below −ε_low: not clipped (one-sided)
    assert lp.grad[0, 3].item() == 0.0  # A=0: δ* = 0
    assert lp.grad[1, 0].item() == 0.0  # A<0, δ below −ε_low: clipped
    assert lp.grad[1, 1].item() != 0.0  # A<0, δ above ε_high: kept
    assert lp.grad[2].abs().sum().item() == 0.0


def test_geo_mean_is_weights_geometric_mean_with_tiny_floor():
    w = [[1.0, 4.0, 0.25, 2.0], [0.0, 1.0, 1.0, 5.0], [3.0, 3.0, 3.0, 3.0]]  # a zero weight → ≈1e-10, not 0
    old, lp, adv, mask = tensors(G_DELTA, G_ADV, G_MASK, G_OLD)
    loss, _ = compute_policy_loss_geo_mean(old, lp, adv, mask, rollout_is_weights=torch.tensor(w, dtype=torch.float64))
    want, _, _ = plain_geo_mean(weights=w)
    assert loss.item() == pytest.approx(want, rel=1e-9)
    assert loss.item() != 0.0
