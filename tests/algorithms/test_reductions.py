"""Masked reductions (docs/algorithms.md §1, §9.1)."""

import math

import pytest
import torch

from roll.algorithms import clip_by_value, entropy_from_logits, masked_mean, masked_sum, masked_var, masked_whiten
from tests.algorithms import plain_reference as ref

X = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
M = [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def t(rows, dtype=torch.float32):
    return torch.tensor(rows, dtype=dtype)


def test_masked_sum_ignores_nan_and_inf_outside_the_mask():
    x = t([[1.0, float("nan"), 2.0], [float("inf"), 3.0, -float("inf")]])
    m = t([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    assert masked_sum(x, m).item() == 6.0
    assert masked_sum(x, m, axis=-1).tolist() == [3.0, 3.0]


def test_masked_sum_uses_mask_as_weight():
    assert masked_sum(t([[2.0, 3.0]]), t([[0.5, 2.0]])).item() == pytest.approx(7.0)


def test_masked_mean_value_and_empty_row_gives_zero():
    assert masked_mean(t(X), t(M)).item() == pytest.approx((1 + 2 + 4) / 3)
    rows = masked_mean(t(X), t([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]), axis=-1)
    assert rows.tolist() == pytest.approx([2.0, 0.0])
    assert not torch.isnan(rows).any()


def test_masked_mean_eps_is_added_to_the_denominator():
    # float64 resolves the 1e-8: 2 / (1 + 1e-8) ≠ 2
    got = masked_mean(t([[2.0, 7.0]], torch.float64), t([[1.0, 0.0]], torch.float64)).item()
    assert got == pytest.approx(2.0 / (1.0 + 1e-8), rel=1e-14)
    assert got != 2.0


def test_masked_var_unbiased_with_eps_formula():
    x, m = [[0.5, 1.5, 4.0, 100.0]], [[1.0, 1.0, 1.0, 0.0]]
    got = masked_var(t(x, torch.float64), t(m, torch.float64)).item()
    assert got == pytest.approx(ref.masked_var(x, m), rel=1e-13)
    # biased: S / (N + 1e-8)
    mu = (0.5 + 1.5 + 4.0) / 3
    biased = sum((a - mu) ** 2 for a in (0.5, 1.5, 4.0)) / (3 + 1e-8)
    assert masked_var(t(x, torch.float64), t(m, torch.float64), unbiased=False).item() == pytest.approx(
        biased, rel=1e-13
    )


@pytest.mark.parametrize("mask", [[[0.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]]])
def test_masked_var_raises_for_fewer_than_two_valid(mask):
    with pytest.raises(ValueError):
        masked_var(t([[1.0, 2.0, 3.0]]), t(mask))


def test_masked_var_biased_accepts_single_element():
    assert masked_var(t([[1.0, 2.0, 3.0]]), t([[0.0, 1.0, 0.0]]), unbiased=False).item() == 0.0


def test_masked_whiten_is_not_remasked_and_uses_eps_on_variance():
    # tiny spread: adding 1e-8 to the variance (not to the std) matters here
    x = [[0.0, 1e-4, 5.0], [2e-4, 3.0, 3.0]]
    m = [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    got = masked_whiten(t(x, torch.float64), t(m, torch.float64))
    want = ref.whiten(x, m)
    assert got.tolist() == [pytest.approx(r, rel=1e-9) for r in want]
    assert got[0, 2].item() != 0.0  # masked position is whitened too
    mu, var = ref.masked_mean(x, m), ref.masked_var(x, m)
    std_eps = [(a - mu) / (math.sqrt(var) + 1e-8) for a in x[0]]
    assert got[0].tolist() != pytest.approx(std_eps, rel=1e-3)


def test_masked_whiten_without_shift_adds_the_mean_back():
    x, m = [[1.0, 2.0, 6.0]], [[1.0, 1.0, 1.0]]
    got = masked_whiten(t(x, torch.float64), t(m, torch.float64), shift_mean=False)
    mu = ref.masked_mean(x, m)
    assert got.tolist()[0] == pytest.approx([w + mu for w in ref.whiten(x, m)[0]], rel=1e-12)


def test_clip_by_value_with_tensor_bounds():
    got = clip_by_value(t([-2.0, 0.5, 3.0]), t([-1.0, 0.0, 0.0]), t([1.0, 0.2, 4.0]))
    assert got.tolist() == pytest.approx([-1.0, 0.2, 3.0])


def test_entropy_from_logits_matches_plain_entropy():
    logits = [[[0.0, 1.0, -2.0, 0.5]], [[3.0, 3.0, 3.0, 3.0]]]
    got = entropy_from_logits(t(logits, torch.float64))
    assert got.shape == (2, 1)
    for b, row in enumerate(logits):
        z = row[0]
        total = sum(math.exp(v) for v in z)
        p = [math.exp(v) / total for v in z]
        assert got[b, 0].item() == pytest.approx(-sum(q * math.log(q) for q in p), rel=1e-12)
    assert got[1, 0].item() == pytest.approx(math.log(4))


def test_reductions_do_not_modify_inputs():
    x, m = t(X), t(M)
    x0, m0 = x.clone(), m.clone()
    for fn in (masked_sum, masked_mean, masked_var, masked_whiten):
        fn(x, m)
    entropy_from_logits(x)
    assert torch.equal(x, x0) and torch.equal(m, m0)
