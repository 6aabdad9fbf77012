"""Seed rollout IS (docs/rollout_correction.md §7.1–7.5; docs/algorithms.md §9.14–9.15). Expected values come from
hand calculations or from the loop reference in rollout_reference.py (written from the documented formulas, not
from roll's code)."""

import math

import pytest
import torch

from roll.algorithms import compute_mismatch_metrics, compute_rollout_importance_weights
from tests.algorithms.rollout_reference import assert_close, from_log_ratios, make_batch, seed_reference

LN2 = math.log(2.0)

MISMATCH_KEYS = {
    f"mismatch_{k}"
    for k in (
        "training_ppl",
        "training_log_ppl",
        "kl",
        "k3_kl",
        "rollout_ppl",
        "rollout_log_ppl",
        "log_ppl_diff",
        "log_ppl_abs_diff",
        "log_ppl_diff_max",
        "log_ppl_diff_min",
        "ppl_ratio",
    )
}
IS_KEYS = {
    f"rollout_is_{k}"
    for k in (
        "veto_fraction",
        "catastrophic_token_fraction",
        "mean",
        "ratio_fraction_high",
        "ratio_fraction_low",
        "max",
        "min",
        "std",
        "eff_sample_size",
        "seq_mean",
        "seq_std",
        "seq_max",
        "seq_min",
        "seq_max_deviation",
        "seq_fraction_high",
        "seq_fraction_low",
        "p25",
        "p50",
        "p75",
        "p95",
        "p99",
    )
}
CLIP_KEYS = {"rollout_is_clipped_fraction", "rollout_is_seq_clipped_fraction"}
MASK_KEYS = {"rollout_is_masked_fraction", "rollout_is_seq_masked_fraction"}


def prefixed(keys):
    return {f"mismatch/{k}" for k in keys}


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
@pytest.mark.parametrize("mode", ["truncate", "clip", "mask"])
def test_matches_loop_reference(level, mode):
    old, rollout, mask = make_batch()
    weights, metrics = compute_rollout_importance_weights(old, rollout, mask, level, mode, rollout_is_threshold=2.0)
    ref_weights, ref_metrics = seed_reference(old.tolist(), rollout.tolist(), mask.tolist(), level, mode, 2.0)
    assert_close(metrics, {f"mismatch/{k}": v for k, v in ref_metrics.items()})
    torch.testing.assert_close(weights, torch.tensor(ref_weights, dtype=torch.float32), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode, extra", [("truncate", set()), ("clip", CLIP_KEYS), ("mask", MASK_KEYS)])
def test_exact_key_sets(mode, extra):
    old, rollout, mask = make_batch()
    _, metrics = compute_rollout_importance_weights(old, rollout, mask, "token", mode, rollout_is_threshold=2.0)
    assert set(metrics) == prefixed(IS_KEYS | MISMATCH_KEYS | extra)
    assert len(metrics) == 32 + len(extra)
    assert all(type(v) is float for v in metrics.values())
    assert set(compute_mismatch_metrics(old, rollout, mask)) == MISMATCH_KEYS


def test_threshold_none_computes_nothing():
    old, rollout, mask = make_batch()
    assert compute_rollout_importance_weights(old, rollout, mask) == (None, {})


def test_truncate_caps_above_without_lower_bound():
    old, rollout, mask = from_log_ratios([[math.log(3.0), math.log(0.5), 0.0, math.log(0.01)]])
    weights, metrics = compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=2.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 0.5, 1.0, 0.01]]))
    assert metrics["mismatch/rollout_is_max"] == pytest.approx(3.0, rel=1e-6)  # before truncation
    assert metrics["mismatch/rollout_is_ratio_fraction_high"] == pytest.approx(0.25)
    assert metrics["mismatch/rollout_is_ratio_fraction_low"] == pytest.approx(0.25)  # 0.01 < 1/2


def test_clip_zeroes_outside_inclusive_bounds_and_counts_valid_tokens_only():
    rows = [
        [math.log(4.0), math.log(0.25), 0.0, math.log(1.5), math.log(0.6)],
        [0.0, math.log(1.2), math.log(100.0), 0.0, 0.0],
    ]  # row 1: the 100 sits on padding
    old, rollout, mask = from_log_ratios(rows, lengths=[5, 2])
    weights, metrics = compute_rollout_importance_weights(
        old, rollout, mask, rollout_is_mode="clip", rollout_is_threshold=2.0
    )
    torch.testing.assert_close(weights, torch.tensor([[0.0, 0.0, 1.0, 1.5, 0.6], [1.0, 1.2, 0.0, 0.0, 0.0]]))
    assert metrics["mismatch/rollout_is_clipped_fraction"] == pytest.approx(2 / 7)
    assert metrics["mismatch/rollout_is_seq_clipped_fraction"] == pytest.approx(1 / 2)
    # bounds are inclusive: with L = U = 1 a ratio of exactly 1 survives
    old, rollout, mask = from_log_ratios([[0.0, 0.5]])
    weights, _ = compute_rollout_importance_weights(
        old, rollout, mask, rollout_is_mode="clip", rollout_is_threshold=1.0, rollout_is_threshold_lower=1.0
    )
    assert weights.tolist() == [[1.0, 0.0]]


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
def test_clip_and_mask_give_same_values_under_their_own_names(level):
    old, rollout, mask = make_batch(seed=3)
    w_clip, m_clip = compute_rollout_importance_weights(old, rollout, mask, level, "clip", 1.5)
    w_mask, m_mask = compute_rollout_importance_weights(old, rollout, mask, level, "mask", 1.5)
    torch.testing.assert_close(w_clip, w_mask, rtol=0, atol=0)
    renamed = {k.replace("clipped", "masked"): v for k, v in m_clip.items()}
    assert renamed == m_mask
    assert "mismatch/rollout_is_clipped_fraction" not in m_mask
    assert "mismatch/rollout_is_masked_fraction" not in m_clip


def test_lower_threshold_defaults_to_reciprocal_of_upper():
    old, rollout, mask = make_batch(seed=1)
    default = compute_rollout_importance_weights(old, rollout, mask, "token", "clip", 2.0)
    explicit = compute_rollout_importance_weights(old, rollout, mask, "token", "clip", 2.0, 0.5)
    other = compute_rollout_importance_weights(old, rollout, mask, "token", "clip", 2.0, 0.1)
    torch.testing.assert_close(default[0], explicit[0], rtol=0, atol=0)
    assert default[1] == explicit[1]
    assert other[1]["mismatch/rollout_is_ratio_fraction_low"] < default[1]["mismatch/rollout_is_ratio_fraction_low"]


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
@pytest.mark.parametrize("mode", ["truncate", "clip"])
def test_veto_kills_the_whole_row(level, mode):
    rows = [
        [0.1, math.log(1e-5), -0.1, 0.0],  # one catastrophic valid token
        [0.1, -0.1, 0.05, 0.0],
        [0.0, 0.2, 0.0, 0.0],
    ]
    old, rollout, mask = from_log_ratios(rows, lengths=[4, 3, 2])
    weights, metrics = compute_rollout_importance_weights(
        old, rollout, mask, level, mode, rollout_is_threshold=5.0, rollout_is_threshold_lower=1e-9
    )
    assert weights[0].abs().sum() == 0
    assert (weights[1, :3] > 0).all() and (weights[2, :2] > 0).all()
    assert metrics["mismatch/rollout_is_veto_fraction"] == pytest.approx(1 / 3)
    assert metrics["mismatch/rollout_is_catastrophic_token_fraction"] == pytest.approx(1 / 9)
    # disabled veto: the row survives (truncate keeps tiny token weights as they are)
    weights, metrics = compute_rollout_importance_weights(
        old, rollout, mask, level, "truncate", 5.0, rollout_is_veto_threshold=None
    )
    assert (weights[0] > 0).all()
    assert metrics["mismatch/rollout_is_veto_fraction"] == 0.0
    assert metrics["mismatch/rollout_is_catastrophic_token_fraction"] == 0.0


def test_veto_is_one_sided():
    old, rollout, mask = from_log_ratios([[math.log(1e5), 0.0]])
    weights, metrics = compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=2.0)
    assert weights.tolist() == [[2.0, 1.0]]
    assert metrics["mismatch/rollout_is_veto_fraction"] == 0.0


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
def test_catastrophic_token_on_padding_does_not_veto(level):
    old, rollout, mask = from_log_ratios([[0.1, -0.2, -50.0], [0.0, 0.1, 0.0]], lengths=[2, 3])
    weights, metrics = compute_rollout_importance_weights(old, rollout, mask, level, rollout_is_threshold=2.0)
    assert (weights[0, :2] > 0.5).all() and weights[0, 2] == 0
    assert metrics["mismatch/rollout_is_veto_fraction"] == 0.0
    assert metrics["mismatch/rollout_is_catastrophic_token_fraction"] == 0.0


def test_safety_bound_on_token_weights():
    old, rollout, mask = from_log_ratios([[30.0, -30.0, 0.0]])
    weights, metrics = compute_rollout_importance_weights(
        old, rollout, mask, rollout_is_threshold=2.0, rollout_is_veto_threshold=None
    )
    assert metrics["mismatch/rollout_is_max"] == pytest.approx(math.exp(20.0), rel=1e-5)
    assert metrics["mismatch/rollout_is_min"] == pytest.approx(math.exp(-20.0), rel=1e-5)
    torch.testing.assert_close(weights, torch.tensor([[2.0, math.exp(-20.0), 1.0]]))
    assert all(math.isfinite(v) for k, v in metrics.items() if "rollout_is" in k)


def test_safety_bound_on_sequence_weights_and_unclamped_min():
    old, rollout, mask = from_log_ratios([[15.0, 15.0], [-15.0, -15.0], [0.1, 0.0]])
    weights, metrics = compute_rollout_importance_weights(
        old, rollout, mask, "sequence", rollout_is_threshold=2.0, rollout_is_veto_threshold=None
    )
    assert metrics["mismatch/rollout_is_max"] == pytest.approx(math.exp(20.0), rel=1e-5)  # Λ = 30 capped at 20
    assert metrics["mismatch/rollout_is_min"] == pytest.approx(math.exp(-30.0), rel=1e-4)  # not clamped
    torch.testing.assert_close(weights[1], torch.full((2,), math.exp(-20.0)))  # the weight itself is clamped
    assert metrics["mismatch/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3)
    assert metrics["mismatch/rollout_is_ratio_fraction_low"] == pytest.approx(1 / 3)


def test_sequence_metrics_include_empty_rows():
    # Both non-empty rows have Λ < 0; the empty row has Λ = 0 → weight 1, which becomes the max.
    old, rollout, mask = from_log_ratios([[-0.5, -0.5], [0.0, 0.0], [-0.3, 0.0]], lengths=[2, 0, 1])
    weights, metrics = compute_rollout_importance_weights(old, rollout, mask, "sequence", rollout_is_threshold=2.0)
    assert metrics["mismatch/rollout_is_max"] == pytest.approx(1.0)
    assert metrics["mismatch/rollout_is_min"] == pytest.approx(math.exp(-1.0), rel=1e-6)
    assert metrics["mismatch/rollout_is_ratio_fraction_low"] == pytest.approx(1 / 3)  # exp(-1) < 0.5, over 3 rows
    assert metrics["mismatch/rollout_is_seq_min"] == 0.0  # q of the empty row
    assert metrics["mismatch/rollout_is_seq_fraction_low"] == pytest.approx(2 / 3)  # exp(-1) row + empty row
    assert metrics["mismatch/rollout_is_seq_mean"] == pytest.approx((math.exp(-1.0) + math.exp(-0.3)) / 3, rel=1e-6)
    assert weights[1].tolist() == [0.0, 0.0]
    # clip: the empty row (weight 1 ∈ [L, U]) is kept, so only the exp(-1) row counts out of 3
    _, metrics = compute_rollout_importance_weights(old, rollout, mask, "sequence", "clip", rollout_is_threshold=2.0)
    assert metrics["mismatch/rollout_is_seq_clipped_fraction"] == pytest.approx(1 / 3)
    assert metrics["mismatch/rollout_is_clipped_fraction"] == pytest.approx(2 / 3)  # its 2 of 3 valid tokens


def test_token_level_ignores_empty_rows_for_max_min():
    old, rollout, mask = from_log_ratios([[math.log(1.5), math.log(0.8)], [5.0, -5.0]], lengths=[2, 0])
    _, metrics = compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=2.0)
    assert metrics["mismatch/rollout_is_max"] == pytest.approx(1.5, rel=1e-6)
    assert metrics["mismatch/rollout_is_min"] == pytest.approx(0.8, rel=1e-6)


def test_geometric_fractions_are_token_weighted_sequence_ones_row_weighted():
    # row 0: one token at ratio 4 (> U = 2); row 1: three tokens at ratio 1.
    old, rollout, mask = from_log_ratios([[math.log(4.0), 0.0, 0.0], [0.0, 0.0, 0.0]], lengths=[1, 3])
    _, geo = compute_rollout_importance_weights(old, rollout, mask, "geometric", rollout_is_threshold=2.0)
    _, seq = compute_rollout_importance_weights(old, rollout, mask, "sequence", rollout_is_threshold=2.0)
    assert geo["mismatch/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 4)
    assert seq["mismatch/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 2)


def test_std_and_ess_by_hand_use_weights_clamped_to_bounds():
    old, rollout, mask = from_log_ratios([[0.0, LN2]])
    _, metrics = compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=4.0)
    assert metrics["mismatch/rollout_is_std"] == pytest.approx(0.5, rel=1e-6)
    assert metrics["mismatch/rollout_is_eff_sample_size"] == pytest.approx(0.9, rel=1e-6)
    # weights 0.1 and 10 clamp to 0.5 and 2: std 0.75; ŵ = [0.4, 1.6] → ESS = 1 / 1.36
    old, rollout, mask = from_log_ratios([[math.log(0.1), math.log(10.0)]])
    _, metrics = compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=2.0)
    assert metrics["mismatch/rollout_is_std"] == pytest.approx(0.75, rel=1e-5)
    assert metrics["mismatch/rollout_is_eff_sample_size"] == pytest.approx(1 / 1.36, rel=1e-5)
    # a single valid token: std is 0 by definition
    old, rollout, mask = from_log_ratios([[0.3, 0.0]], lengths=[1])
    _, metrics = compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=2.0)
    assert metrics["mismatch/rollout_is_std"] == 0.0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
def test_ess_is_normalised(seed, level):
    old, rollout, mask = make_batch(seed)
    _, metrics = compute_rollout_importance_weights(old, rollout, mask, level, rollout_is_threshold=3.0)
    assert 0.0 < metrics["mismatch/rollout_is_eff_sample_size"] <= 1.0 + 1e-6
    old, rollout, mask = from_log_ratios([[0.2] * 5])  # equal weights → ESS 1
    _, metrics = compute_rollout_importance_weights(old, rollout, mask, level, rollout_is_threshold=3.0)
    assert metrics["mismatch/rollout_is_eff_sample_size"] == pytest.approx(1.0, abs=1e-6)


def test_percentiles_by_hand():
    old, rollout, mask = from_log_ratios([[math.log(v) for v in (5.0, 1.0, 3.0, 2.0, 4.0)]])
    _, metrics = compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=2.0)
    expected = {"p25": 2.0, "p50": 3.0, "p75": 4.0, "p95": 4.8, "p99": 4.96}  # linear interpolation, pre-truncation
    for name, value in expected.items():
        assert metrics[f"mismatch/rollout_is_{name}"] == pytest.approx(value, rel=1e-5)


def test_seq_per_row_metrics_by_hand():
    # token weights: row 0 = [2, 0.5] → q = 1.25; row 1 = [4] → q = 4; row 2 empty → q = 0
    old, rollout, mask = from_log_ratios([[LN2, -LN2], [2 * LN2, 0.0], [0.0, 0.0]], lengths=[2, 1, 0])
    _, metrics = compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=3.0)
    q = [1.25, 4.0, 0.0]
    mean = sum(q) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in q) / 2)  # unbiased
    assert metrics["mismatch/rollout_is_seq_mean"] == pytest.approx(mean, rel=1e-6)
    assert metrics["mismatch/rollout_is_seq_std"] == pytest.approx(std, rel=1e-6)
    assert metrics["mismatch/rollout_is_seq_max"] == pytest.approx(4.0, rel=1e-6)
    assert metrics["mismatch/rollout_is_seq_max_deviation"] == pytest.approx(3.0, rel=1e-6)
    assert metrics["mismatch/rollout_is_seq_fraction_high"] == pytest.approx(1 / 3)
    assert metrics["mismatch/rollout_is_seq_fraction_low"] == pytest.approx(1 / 3)  # only the empty row


def test_mismatch_metrics_by_hand():
    half, quarter = math.log(0.5), math.log(0.25)
    old = torch.tensor([[half, quarter], [half, 0.0]])
    rollout = torch.tensor([[half, half], [quarter, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    metrics = compute_mismatch_metrics(old, rollout, mask)
    expected = {
        "mismatch_training_log_ppl": 1.25 * LN2,
        "mismatch_training_ppl": (2**1.5 + 2) / 2,
        "mismatch_rollout_log_ppl": 1.5 * LN2,
        "mismatch_rollout_ppl": 3.0,
        "mismatch_kl": 0.0,
        "mismatch_k3_kl": 0.5 / 3,
        "mismatch_log_ppl_diff": -0.25 * LN2,
        "mismatch_log_ppl_abs_diff": 0.75 * LN2,
        "mismatch_log_ppl_diff_max": 0.5 * LN2,
        "mismatch_log_ppl_diff_min": -LN2,
        "mismatch_ppl_ratio": (2**0.5 + 0.5) / 2,
    }
    assert_close(metrics, expected, rel=1e-5, abs_=1e-6)
    only_training = compute_mismatch_metrics(old, None, mask)
    assert set(only_training) == {"mismatch_training_ppl", "mismatch_training_log_ppl"}
    # inside the IS function the same numbers appear under `mismatch/`
    _, is_metrics = compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=2.0)
    assert {k: is_metrics[f"mismatch/{k}"] for k in expected} == metrics


def test_inputs_untouched_and_weights_carry_no_gradient():
    old, rollout, mask = make_batch()
    old.requires_grad_(True)
    copies = [t.detach().clone() for t in (old, rollout, mask)]
    for mode in ("truncate", "clip"):
        weights, _ = compute_rollout_importance_weights(old, rollout, mask, "sequence", mode, 2.0)
        assert not weights.requires_grad
        assert weights.shape == mask.shape and weights.is_contiguous()
    for before, after in zip(copies, (old, rollout, mask)):
        assert torch.equal(before, after.detach())


def test_invalid_arguments_raise():
    old, rollout, mask = make_batch()
    with pytest.raises(ValueError, match="level"):
        compute_rollout_importance_weights(old, rollout, mask, "bogus", rollout_is_threshold=2.0)
    with pytest.raises(ValueError, match="mode"):
        compute_rollout_importance_weights(old, rollout, mask, rollout_is_mode="bogus", rollout_is_threshold=2.0)
    with pytest.raises(ValueError, match="threshold"):
        compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=0.0)
    with pytest.raises(ValueError, match="no valid token"):
        compute_rollout_importance_weights(old, rollout, torch.zeros_like(mask), rollout_is_threshold=2.0)
    with pytest.raises(ValueError, match="no valid token"):
        compute_mismatch_metrics(old, rollout, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="shape"):
        compute_rollout_importance_weights(old, rollout[:, :3], mask, rollout_is_threshold=2.0)
