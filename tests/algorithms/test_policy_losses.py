"""vanilla (dual-clip PPO), gspo, gpg, cispo, sapo (docs/algorithms.md §5.1–5.3, §5.7, §9.10–9.11)."""

import math

import pytest
import torch

from roll.algorithms import (
    PolicyLossConfig,
    compute_policy_loss_cispo,
    compute_policy_loss_gpg,
    compute_policy_loss_gspo,
    compute_policy_loss_sapo,
    compute_policy_loss_vanilla,
)
from tests.algorithms import plain_reference as ref

# δ = lp − old per token. Row 0: A>0 (δ=0.5 clipped high; δ=-0.5 unclipped since A>0).
# Row 1: A<0 (δ=-0.5 clipped low; δ=1.5 → r=4.48, the dual-clip cap 3|A| binds; δ=25 beyond the ±20 clamp).
# Row 2: mixed, half padding (padding holds junk that must not matter).
DELTA = [[0.0, 0.5, -0.5, 0.1], [-0.5, 1.5, 0.05, 25.0], [0.3, -0.2, 40.0, -40.0]]
ADV = [[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0], [0.5, -2.0, 3.0, 3.0]]
MASK = [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]]
OLD = [[-1.0, -2.0, -0.5, -1.5], [-0.7, -3.0, -1.0, -30.0], [-1.2, -0.9, -50.0, -0.1]]
N_VALID = 10


def tensors(delta=DELTA, adv=ADV, mask=MASK, old=OLD):
    old_t = torch.tensor(old, dtype=torch.float64)
    lp = (old_t + torch.tensor(delta, dtype=torch.float64)).requires_grad_(True)
    return old_t, lp, torch.tensor(adv, dtype=torch.float64), torch.tensor(mask, dtype=torch.float64)


def masked_mean(values):
    """A metric: masked_mean with its 1e-8."""
    return ref.masked_mean(values, MASK)


def token_mean(values):
    """A loss: agg_loss token-mean, no eps."""
    return ref.token_mean(values, MASK)


def each_token(fn):
    return [[fn(d, a) for d, a in zip(dr, ar)] for dr, ar in zip(DELTA, ADV)]


# ---------------------------------------------------------------- vanilla


def plain_vanilla(d, a, low=0.2, high=0.2, c=3.0):
    """(loss, clipped, lower, gradient wrt lp) of one token."""
    dc = min(max(d, -20.0), 20.0)
    r = math.exp(dc)
    l1, l2 = -a * r, -a * min(max(r, 1 - low), 1 + high)
    lc, l3 = max(l1, l2), -a * c
    loss = min(l3, lc) if a < 0 else lc
    grad = 0.0 if (abs(d) > 20 or l2 > l1 or (a < 0 and l3 < lc)) else -a * r
    return loss, float(l2 > l1), float(lc > l3 and a < 0), grad


def test_vanilla_value_metrics_and_gradient():
    old, lp, adv, mask = tensors()
    loss, metrics = compute_policy_loss_vanilla(old, lp, adv, mask)
    per = each_token(plain_vanilla)
    assert loss.item() == pytest.approx(token_mean([[p[0] for p in row] for row in per]), rel=1e-12)
    assert metrics == {
        "pg_clipfrac": pytest.approx(masked_mean([[p[1] for p in row] for row in per])),
        "pg_clipfrac_lower": pytest.approx(masked_mean([[p[2] for p in row] for row in per])),
        "ppo_kl": pytest.approx(masked_mean(each_token(lambda d, a: -min(max(d, -20), 20)))),
    }
    assert metrics["pg_clipfrac"] == pytest.approx(3 / 10)  # strict >: δ=0 and A>0 with r<1−ε don't count
    assert metrics["pg_clipfrac_lower"] == pytest.approx(2 / 10)
    loss.backward()
    want = [[p[3] * m / N_VALID for p, m in zip(row, mr)] for row, mr in zip(per, MASK)]
    assert lp.grad.tolist() == [pytest.approx(r, abs=1e-12) for r in want]
    # clipped branches, the dual-clip cap and |δ|>20 get no gradient
    assert [lp.grad[0, 1].item(), lp.grad[1, 0].item(), lp.grad[1, 1].item(), lp.grad[1, 3].item()] == [0.0] * 4


def test_vanilla_asymmetric_clip_and_fallback_to_clip_ratio():
    config = PolicyLossConfig(clip_ratio=0.1, clip_ratio_low=None, clip_ratio_high=0.6, clip_ratio_c=2.0)
    old, lp, adv, mask = tensors()
    loss, metrics = compute_policy_loss_vanilla(old, lp, adv, mask, config=config)
    per = each_token(lambda d, a: plain_vanilla(d, a, low=0.1, high=0.6, c=2.0))
    assert loss.item() == pytest.approx(token_mean([[p[0] for p in row] for row in per]), rel=1e-12)
    assert metrics["pg_clipfrac"] == pytest.approx(masked_mean([[p[1] for p in row] for row in per]))


def test_vanilla_infinite_c_disables_dual_clip_and_stays_finite():
    # the pipeline maps dual_clip_loss: false to clip_ratio_c = inf; A = 0 must not turn 0·inf into NaN
    adv = [row[:] for row in ADV]
    adv[2][0] = 0.0
    old, lp, a, mask = tensors(adv=adv)
    loss, metrics = compute_policy_loss_vanilla(old, lp, a, mask, config=PolicyLossConfig(clip_ratio_c=math.inf))
    per = [[plain_vanilla(d, x, c=math.inf) for d, x in zip(dr, ar)] for dr, ar in zip(DELTA, adv)]
    assert loss.item() == pytest.approx(token_mean([[p[0] for p in row] for row in per]), rel=1e-12)
    assert metrics["pg_clipfrac_lower"] == 0.0
    loss.backward()
    assert torch.isfinite(lp.grad).all()
    assert lp.grad[1, 1].item() != 0.0  # without the cap, r = 4.48 with A < 0 keeps its gradient


def test_vanilla_rejects_clip_ratio_c_not_above_one():
    with pytest.raises(ValueError):
        compute_policy_loss_vanilla(*tensors(), config=PolicyLossConfig(clip_ratio_c=1.0))


def test_vanilla_is_weights_multiply_per_token_before_aggregation():
    old, lp, adv, mask = tensors()
    w = [[0.5, 2.0, 1.0, 0.0], [1.5, 1.0, 3.0, 1.0], [0.2, 1.0, 9.0, 9.0]]
    loss, _ = compute_policy_loss_vanilla(
        old, lp, adv, mask, loss_agg_mode="seq-mean-token-sum", rollout_is_weights=torch.tensor(w, dtype=torch.float64)
    )
    per = each_token(plain_vanilla)
    rows = [sum(p[0] * wi * m for p, wi, m in zip(pr, wr, mr)) for pr, wr, mr in zip(per, w, MASK)]
    assert loss.item() == pytest.approx(sum(rows) / 3, rel=1e-9)


# ---------------------------------------------------------------- GSPO


def plain_gspo_rows(delta, adv, mask, low, high):
    """Per row: (s_i, list of per-token losses)."""
    out = []
    for dr, ar, mr in zip(delta, adv, mask):
        n = max(sum(mr), 1)
        s = math.exp(min(sum(d * m for d, m in zip(dr, mr)) / n, 10.0))
        out.append((s, [max(-a * s, -a * min(max(s, 1 - low), 1 + high)) for a in ar]))
    return out


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_gspo_value_ignores_loss_agg_mode(mode):
    config = PolicyLossConfig(clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    delta = [[0.001, -0.002, 0.0005, 0.0], [-0.3, -0.1, 0.1, 0.0], [0.0, 0.0, 5.0, 5.0]]
    old, lp, adv, mask = tensors(delta=delta)
    loss, metrics = compute_policy_loss_gspo(old, lp, adv, mask, loss_agg_mode=mode, config=config)
    rows = plain_gspo_rows(delta, ADV, MASK, 3e-4, 4e-4)
    per_row = [sum(x * m for x, m in zip(losses, mr)) / (sum(mr) + 1e-8) for (_, losses), mr in zip(rows, MASK)]
    assert loss.item() == pytest.approx(sum(per_row) / 3, rel=1e-12)
    assert metrics["ppo_kl"] == pytest.approx(ref.masked_mean([[-d for d in r] for r in delta], MASK))
    assert metrics["pg_clipfrac_lower"] == 0.0
    clipped = [[float(-a * min(max(s, 1 - 3e-4), 1 + 4e-4) > -a * s) for a in ar] for (s, _), ar in zip(rows, ADV)]
    assert metrics["pg_clipfrac"] == pytest.approx(ref.masked_mean(clipped, MASK))
    assert 0.0 < metrics["pg_clipfrac"] < 1.0


def test_gspo_token_gradient_is_the_sequence_ratio():
    config = PolicyLossConfig(clip_ratio_low=0.99, clip_ratio_high=100.0)  # no clipping here
    delta = [[0.2, -0.1, 0.4, 0.3], [0.1, 0.1, 0.1, 30.0], [0.5, -0.5, 9.0, 9.0]]  # unclamped: mean δ ≤ 7.6
    old, lp, adv, mask = tensors(delta=delta)
    loss, _ = compute_policy_loss_gspo(old, lp, adv, mask, config=config)
    loss.backward()
    rows = plain_gspo_rows(delta, ADV, MASK, 0.99, 100.0)
    for i, ((s, _), ar, mr) in enumerate(zip(rows, ADV, MASK)):
        n = sum(mr)
        want = [-a * s * m / (n + 1e-8) / 3 for a, m in zip(ar, mr)]  # d s_it / d lp_it = s_i
        assert lp.grad[i].tolist() == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_gspo_clamps_log_ratio_above_ten_only():
    delta = [[12.0, 12.0, 12.0, 12.0], [-30.0, -30.0, -30.0, -30.0], [0.0, 0.0, 0.0, 0.0]]
    config = PolicyLossConfig(clip_ratio_low=2.0, clip_ratio_high=1e9)
    old, lp, adv, mask = tensors(delta=delta)
    loss, _ = compute_policy_loss_gspo(old, lp, adv, mask, config=config)
    loss.backward()
    assert lp.grad[0].abs().sum().item() == 0.0  # clamp at 10 active: no gradient
    assert lp.grad[1].abs().sum().item() > 0.0  # no lower clamp
    row0, row1 = -4 * math.exp(10.0) / (4 + 1e-8), 4 * math.exp(-30.0) / (4 + 1e-8)
    row2 = (-0.5 * 1.0 + 2.0 * 1.0) / (2 + 1e-8)  # δ = 0: s = 1
    assert loss.item() == pytest.approx((row0 + row1 + row2) / 3, rel=1e-12)


# ---------------------------------------------------------------- GPG, CISPO, SAPO


def test_gpg_plain_policy_gradient():
    old, lp, adv, mask = tensors()
    loss, metrics = compute_policy_loss_gpg(old, lp, adv, mask)
    lp_rows = lp.detach().tolist()
    assert loss.item() == pytest.approx(
        token_mean([[-x * a for x, a in zip(lr, ar)] for lr, ar in zip(lp_rows, ADV)]), rel=1e-12
    )
    assert metrics == {"pg_clipfrac": 0.0, "ppo_kl": 0.0, "pg_clipfrac_lower": 0.0}
    loss.backward()
    assert lp.grad.tolist() == [pytest.approx([-a * m / N_VALID for a, m in zip(ar, mr)]) for ar, mr in zip(ADV, MASK)]


def test_cispo_value_gradient_flows_through_clipped_tokens():
    old, lp, adv, mask = tensors()
    loss, metrics = compute_policy_loss_cispo(old, lp, adv, mask)
    lp_rows = lp.detach().tolist()
    r_hat = each_token(lambda d, a: min(max(math.exp(min(max(d, -20), 20)), 0.8), 1.2))
    per = [[-rh * a * x for rh, a, x in zip(rr, ar, lr)] for rr, ar, lr in zip(r_hat, ADV, lp_rows)]
    assert loss.item() == pytest.approx(token_mean(per), rel=1e-12)
    is_clipped = each_token(lambda d, a: float(not 0.8 <= math.exp(min(max(d, -20), 20)) <= 1.2))
    assert metrics["pg_clipfrac"] == pytest.approx(masked_mean(is_clipped))
    assert metrics["ppo_kl"] == pytest.approx(masked_mean(each_token(lambda d, a: -min(max(d, -20), 20))))
    assert metrics["pg_clipfrac_lower"] == 0.0
    loss.backward()
    want = [[-rh * a * m / N_VALID for rh, a, m in zip(rr, ar, mr)] for rr, ar, mr in zip(r_hat, ADV, MASK)]
    assert lp.grad.tolist() == [pytest.approx(r, rel=1e-9) for r in want]
    assert lp.grad[0, 1].item() != 0.0  # clipped ratio, still a gradient


def test_sapo_soft_gate_value_and_gradient():
    config = PolicyLossConfig(tau_pos=2.0, tau_neg=0.5)
    delta = [[0.0, 0.5, -0.5, 0.1], [-0.5, 1.5, 0.05, 0.2], [0.3, -0.2, 40.0, -40.0]]
    old, lp, adv, mask = tensors(delta=delta)
    loss, metrics = compute_policy_loss_sapo(old, lp, adv, mask, loss_agg_mode="token-mean", config=config)
    rows_loss, grads = [], []
    for dr, ar, mr in zip(delta, ADV, MASK):
        n, total, grad_row = sum(mr), 0.0, []
        for d, a, m in zip(dr, ar, mr):
            tau, r = (2.0 if a > 0 else 0.5), math.exp(min(max(d, -20), 20))
            sig = ref.sigmoid(tau * (r - 1))
            total += -sig * 4 / tau * a * m
            grad_row.append(-a * 4 * sig * (1 - sig) * r * m / (n + 1e-8) / 3)
        rows_loss.append(total / (n + 1e-8))
        grads.append(grad_row)
    assert loss.item() == pytest.approx(sum(rows_loss) / 3, rel=1e-12)  # seq-mean-token-mean regardless of mode
    assert metrics == {
        "pg_clipfrac": 0.0,
        "pg_clipfrac_lower": 0.0,
        "ppo_kl": pytest.approx(ref.masked_mean([[-min(max(d, -20), 20) for d in r] for r in delta], MASK)),
    }
    loss.backward()
    assert lp.grad.tolist() == [pytest.approx(g, rel=1e-12, abs=1e-15) for g in grads]
