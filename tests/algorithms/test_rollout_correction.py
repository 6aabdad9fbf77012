"""Head rollout correction (docs/rollout_correction.md §7.6; docs/algorithms.md §9.16). Expected values come from
hand calculations or from the loop reference in rollout_reference.py (written from the documented formulas, not
from roll's code)."""

import math

import pytest
import torch
import torch.distributed as dist

from roll.algorithms import compute_rollout_correction_and_rejection_mask, compute_rollout_importance_weights
from tests.algorithms.rollout_reference import (
    assert_close,
    chi2_reference,
    from_log_ratios,
    head_is_reference,
    head_rs_reference,
    make_batch,
    offpolicy,
)

LN2 = math.log(2.0)
OFFPOLICY_KEYS = {
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
    "chi2_token",
    "chi2_seq",
}
IS_KEYS = {
    f"rollout_is_{k}"
    for k in (
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
    )
}
RS_OPTION_KEYS = (
    "mean",
    "max",
    "min",
    "fraction_high",
    "fraction_low",
    "std",
    "seq_mean",
    "seq_std",
    "seq_max",
    "seq_min",
    "seq_max_deviation",
    "seq_fraction_high",
    "masked_fraction",
    "seq_masked_fraction",
)


def corr(keys):
    return {f"rollout_corr/{k}" for k in keys}


def run(old, rollout, mask, **kwargs):
    return compute_rollout_correction_and_rejection_mask(old, rollout, mask, **kwargs)


def reference_offpolicy(old, rollout, mask):
    lists = old.tolist(), rollout.tolist(), mask.tolist()
    return {**offpolicy(*lists), **chi2_reference(*lists)}


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("batch_normalize", [False, True])
@pytest.mark.parametrize("threshold", [2.0, 1.2])
def test_is_weights_match_loop_reference(level, batch_normalize, threshold):
    old, rollout, mask = make_batch(seed=2)
    weights, new_mask, metrics = run(
        old, rollout, mask, rollout_is=level, rollout_is_threshold=threshold, rollout_is_batch_normalize=batch_normalize
    )
    ref_weights, ref_metrics = head_is_reference(
        old.tolist(), rollout.tolist(), mask.tolist(), level, threshold, batch_normalize
    )
    expected = {**ref_metrics, **reference_offpolicy(old, rollout, mask)}
    assert_close(metrics, {f"rollout_corr/{k}": v for k, v in expected.items()})
    torch.testing.assert_close(weights, torch.tensor(ref_weights, dtype=torch.float32), rtol=1e-5, atol=1e-7)
    assert torch.equal(new_mask, mask)


RS_CASES = [
    ("token_k1", "0.7_1.8", [(0.7, 1.8)]),
    ("token_k1", "1.5", [(1 / 1.5, 1.5)]),
    ("token_k2,token_k3", "0.05", [(None, 0.05), (None, 0.05)]),
    ("seq_sum_k1,seq_sum_k2,seq_sum_k3", "0.5_3,0.6,0.8", [(0.5, 3.0), (None, 0.6), (None, 0.8)]),
    ("seq_mean_k1,seq_mean_k2,seq_mean_k3", "0.5_2,0.2,0.3", [(0.5, 2.0), (None, 0.2), (None, 0.3)]),
    ("seq_max_k2,seq_max_k3", "0.3,0.4", [(None, 0.3), (None, 0.4)]),
]


@pytest.mark.parametrize("rollout_rs, threshold, bounds", RS_CASES)
def test_rejection_matches_loop_reference(rollout_rs, threshold, bounds):
    old, rollout, mask = make_batch(seed=4)
    weights, new_mask, metrics = run(old, rollout, mask, rollout_rs=rollout_rs, rollout_rs_threshold=threshold)
    options = rollout_rs.split(",")
    ref_mask, ref_metrics = head_rs_reference(old.tolist(), rollout.tolist(), mask.tolist(), options, bounds)
    expected = {**ref_metrics, **reference_offpolicy(old, rollout, mask)}
    assert_close(metrics, {f"rollout_corr/{k}": v for k, v in expected.items()})
    assert weights is None
    assert new_mask.tolist() == ref_mask
    assert 0 < metrics["rollout_corr/rollout_rs_masked_fraction"] < 1  # the case really rejects something


def test_exact_key_sets():
    old, rollout, mask = make_batch()
    _, _, plain = run(old, rollout, mask)
    assert set(plain) == corr(OFFPOLICY_KEYS)
    _, _, with_is = run(old, rollout, mask, rollout_is="token")
    assert set(with_is) == corr(OFFPOLICY_KEYS | IS_KEYS)
    _, _, with_bn = run(old, rollout, mask, rollout_is="sequence", rollout_is_batch_normalize=True)
    assert set(with_bn) == corr(OFFPOLICY_KEYS | IS_KEYS | {"rollout_is_batch_norm_factor"})
    _, _, with_rs = run(old, rollout, mask, rollout_rs="token_k1,seq_max_k3", rollout_rs_threshold="2,0.5")
    k1_keys = {f"rollout_rs_token_k1_{k}" for k in RS_OPTION_KEYS} | {"rollout_rs_token_k1_seq_fraction_low"}
    k3_keys = {f"rollout_rs_seq_max_k3_{k}" for k in RS_OPTION_KEYS}  # no seq_fraction_low for k2/k3
    totals = {"rollout_rs_masked_fraction", "rollout_rs_seq_masked_fraction"}
    assert set(with_rs) == corr(OFFPOLICY_KEYS | k1_keys | k3_keys | totals)
    assert with_rs["rollout_corr/rollout_rs_seq_max_k3_fraction_low"] == 0.0  # present, always 0 for k3
    assert all(type(v) is float for v in with_rs.values())


def test_k1_bounds_apply_to_the_inverse_ratio():
    # ρ = 3 → 1/ρ = 1/3 < 0.5: rejected; ρ = 0.3 → 1/ρ = 3.33 ≤ 4: kept. Bounds on ρ would do the opposite.
    old, rollout, mask = from_log_ratios([[math.log(3.0), math.log(0.3), 0.0]])
    _, new_mask, metrics = run(old, rollout, mask, rollout_rs="token_k1", rollout_rs_threshold="0.5_4")
    assert new_mask.tolist() == [[0.0, 1.0, 1.0]]
    assert metrics["rollout_corr/rollout_rs_token_k1_fraction_low"] == pytest.approx(1 / 3)
    assert metrics["rollout_corr/rollout_rs_token_k1_fraction_high"] == 0.0
    assert metrics["rollout_corr/rollout_rs_token_k1_min"] == pytest.approx(-math.log(3.0), rel=1e-6)


def test_k1_single_threshold_means_reciprocal_lower_bound():
    old, rollout, mask = make_batch(seed=5)
    single = run(old, rollout, mask, rollout_rs="seq_mean_k1", rollout_rs_threshold=1.3)
    pair = run(old, rollout, mask, rollout_rs="seq_mean_k1", rollout_rs_threshold=f"{1 / 1.3}_1.3")
    assert torch.equal(single[1], pair[1])
    assert single[2] == pytest.approx(pair[2], rel=1e-6)


def test_per_option_and_total_seq_masked_fractions_use_different_denominators():
    # rows: rejected, kept, kept, empty → per option 1/3 (non-empty rows), total 1/4 (all rows)
    old, rollout, mask = from_log_ratios([[1.0, 0.0], [0.1, 0.0], [0.0, 0.1], [0.0, 0.0]], lengths=[2, 2, 2, 0])
    _, new_mask, metrics = run(old, rollout, mask, rollout_rs="token_k2", rollout_rs_threshold=0.1)
    assert new_mask.tolist() == [[0.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    assert metrics["rollout_corr/rollout_rs_token_k2_seq_masked_fraction"] == pytest.approx(1 / 3)
    assert metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 4)
    assert metrics["rollout_corr/rollout_rs_token_k2_masked_fraction"] == pytest.approx(1 / 6)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 6)


def test_sequence_option_fractions_are_row_fractions_and_std_is_clamped():
    # row 0: one token with ℓ = 1 (k2 = 0.5); row 1: three tokens with ℓ = 0 (k2 = 0); threshold 0.1
    old, rollout, mask = from_log_ratios([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], lengths=[1, 3])
    _, _, metrics = run(old, rollout, mask, rollout_rs="seq_mean_k2,token_k2", rollout_rs_threshold=0.1)
    assert metrics["rollout_corr/rollout_rs_seq_mean_k2_fraction_high"] == pytest.approx(1 / 2)  # rows
    assert metrics["rollout_corr/rollout_rs_token_k2_fraction_high"] == pytest.approx(1 / 4)  # tokens
    assert metrics["rollout_corr/rollout_rs_seq_mean_k2_masked_fraction"] == pytest.approx(1 / 4)
    assert metrics["rollout_corr/rollout_rs_seq_mean_k2_mean"] == pytest.approx(0.5 / 4, rel=1e-5)  # token-weighted
    assert metrics["rollout_corr/rollout_rs_seq_mean_k2_seq_mean"] == pytest.approx(0.25, rel=1e-5)
    # clamped to [0, 0.1]: values {0.1, 0, 0, 0} → std = sqrt(0.0025 - 0.000625); unclamped would be ≈ 0.2165
    assert metrics["rollout_corr/rollout_rs_token_k2_std"] == pytest.approx(math.sqrt(0.0025 - 0.025**2), rel=1e-5)


def test_seq_max_deviation_is_distance_from_zero():
    # per-row mean k1 = −mean ℓ: row 0 → −0.3, row 1 → 0.1
    old, rollout, mask = from_log_ratios([[0.3, 0.3], [-0.1, -0.1]])
    _, _, metrics = run(old, rollout, mask, rollout_rs="seq_mean_k1", rollout_rs_threshold=5.0)
    assert metrics["rollout_corr/rollout_rs_seq_mean_k1_seq_max_deviation"] == pytest.approx(0.3, rel=1e-5)
    assert metrics["rollout_corr/rollout_rs_seq_mean_k1_seq_min"] == pytest.approx(-0.3, rel=1e-5)


def test_batch_norm_factor_is_the_divisor_and_only_reported_when_enabled():
    # token weights after truncation at U = 2: [0.1, 0.1, 2] → factor 0.7333; normalised max exceeds U
    old, rollout, mask = from_log_ratios([[math.log(0.1), math.log(0.1), math.log(5.0)]])
    plain, _, plain_metrics = run(old, rollout, mask, rollout_is="token", rollout_is_threshold=2.0)
    normed, _, metrics = run(
        old, rollout, mask, rollout_is="token", rollout_is_threshold=2.0, rollout_is_batch_normalize=True
    )
    factor = 2.2 / 3
    assert "rollout_corr/rollout_is_batch_norm_factor" not in plain_metrics
    assert metrics["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(factor, rel=1e-5)
    torch.testing.assert_close(normed, plain / factor)
    assert normed.max() > 2.0
    assert normed.mean() == pytest.approx(1.0, rel=1e-5)
    # the metrics themselves describe the pre-truncation weights either way
    assert plain_metrics["rollout_corr/rollout_is_max"] == metrics["rollout_corr/rollout_is_max"]


def test_sequence_batch_norm_averages_non_empty_rows():
    old, rollout, mask = from_log_ratios(
        [[math.log(0.25), 0.0, 0.0], [math.log(3.0), 0.0, 0.0], [0.0] * 3], lengths=[1, 3, 0]
    )
    weights, _, metrics = run(
        old, rollout, mask, rollout_is="sequence", rollout_is_threshold=2.0, rollout_is_batch_normalize=True
    )
    factor = (0.25 + 2.0) / 2  # the empty row does not count; row 1 truncated to 2
    assert metrics["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(factor, rel=1e-5)
    torch.testing.assert_close(weights, torch.tensor([[0.25 / factor, 0, 0], [2 / factor] * 3, [0.0] * 3]))


def test_batch_norm_skipped_when_mean_is_negligible():
    old, rollout, mask = from_log_ratios([[-25.0, -30.0]])  # weights exp(-20) ≈ 2e-9 < 1e-8
    weights, _, metrics = run(old, rollout, mask, rollout_is="token", rollout_is_batch_normalize=True)
    assert metrics["rollout_corr/rollout_is_batch_norm_factor"] == 1.0
    torch.testing.assert_close(weights, torch.full((1, 2), math.exp(-20.0)))


def test_batch_norm_with_a_process_group_matches_local(tmp_path):
    old, rollout, mask = make_batch(seed=6)
    local = run(old, rollout, mask, rollout_is="sequence", rollout_is_batch_normalize=True)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        grouped = run(old, rollout, mask, rollout_is="sequence", rollout_is_batch_normalize=True)
    finally:
        dist.destroy_process_group()
    torch.testing.assert_close(grouped[0], local[0])
    assert grouped[2] == pytest.approx(local[2], rel=1e-6)


@pytest.mark.parametrize("rollout_rs, threshold", [("token_k1", "0.8_1.1"), ("seq_sum_k3,token_k2", "0.2,0.02")])
def test_rejection_never_changes_weights(rollout_rs, threshold):
    old, rollout, mask = make_batch(seed=7)
    alone, mask_alone, _ = run(old, rollout, mask, rollout_is="token")
    both, mask_both, _ = run(
        old, rollout, mask, rollout_is="token", rollout_rs=rollout_rs, rollout_rs_threshold=threshold
    )
    assert torch.equal(alone, both)
    assert torch.equal(mask_alone, mask)
    assert (mask_both < mask).any()  # something was rejected, yet the weights are untouched


def test_duplicate_options_are_counted_once():
    old, rollout, mask = make_batch()
    once = run(old, rollout, mask, rollout_rs="token_k2", rollout_rs_threshold=0.05)
    twice = run(old, rollout, mask, rollout_rs=" token_k2 , token_k2", rollout_rs_threshold=0.05)
    assert torch.equal(once[1], twice[1]) and once[2] == twice[2]


def test_chi2_by_hand():
    old, rollout, mask = from_log_ratios([[LN2, 0.0], [-LN2, 5.0]], lengths=[2, 1])
    _, _, metrics = run(old, rollout, mask)
    assert metrics["rollout_corr/chi2_token"] == pytest.approx((4 + 1 + 0.25) / 3 - 1, rel=1e-5)
    assert metrics["rollout_corr/chi2_seq"] == pytest.approx((4 + 0.25) / 2 - 1, rel=1e-5)


def test_head_and_seed_share_weight_and_offpolicy_metrics():
    old, rollout, mask = make_batch(seed=8)
    for level in ("token", "sequence"):
        _, seed = compute_rollout_importance_weights(
            old, rollout, mask, level, rollout_is_threshold=2.0, rollout_is_veto_threshold=None
        )
        _, _, head = run(old, rollout, mask, rollout_is=level, rollout_is_threshold=2.0)
        for key in IS_KEYS:
            assert head[f"rollout_corr/{key}"] == pytest.approx(seed[f"mismatch/{key}"], rel=1e-6), key
        for key in OFFPOLICY_KEYS - {"chi2_token", "chi2_seq"}:
            assert head[f"rollout_corr/{key}"] == seed[f"mismatch/mismatch_{key}"], key


def test_inputs_untouched_and_outputs_are_new_tensors():
    old, rollout, mask = make_batch()
    copies = [t.clone() for t in (old, rollout, mask)]
    weights, new_mask, _ = run(old, rollout, mask, rollout_is="token", rollout_rs="token_k1", rollout_rs_threshold=1.5)
    assert new_mask is not mask and new_mask.dtype == mask.dtype
    _, untouched_mask, _ = run(old, rollout, mask)
    assert untouched_mask is not mask and torch.equal(untouched_mask, mask)
    assert not weights.requires_grad
    for before, after in zip(copies, (old, rollout, mask)):
        assert torch.equal(before, after)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rollout_is": "geometric"}, "rollout_is"),
        ({"rollout_is": "token", "rollout_is_threshold": 0.0}, "threshold"),
        ({"rollout_is": "token", "rollout_is_threshold": None}, "threshold"),
        ({"rollout_rs": "token_k4", "rollout_rs_threshold": 1.0}, "option"),
        ({"rollout_rs": "token_k1"}, "rollout_rs_threshold"),
        ({"rollout_rs": "token_k2", "rollout_rs_threshold": "0.1_0.2"}, "lower_upper"),
        ({"rollout_rs": "token_k2,token_k3,seq_max_k2", "rollout_rs_threshold": "0.1,0.2"}, "one per option"),
        ({"rollout_rs": "token_k2", "rollout_rs_threshold": -1.0}, "> 0"),
        ({"rollout_rs": " , ", "rollout_rs_threshold": 1.0}, "no option"),
    ],
)
def test_invalid_arguments_raise(kwargs, match):
    old, rollout, mask = make_batch()
    with pytest.raises(ValueError, match=match):
        run(old, rollout, mask, **kwargs)


def test_invalid_inputs_raise():
    old, rollout, mask = make_batch()
    with pytest.raises(ValueError, match="no valid token"):
        run(old, rollout, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="shape"):
        run(old, rollout[:, :4], mask)
