"""agg_loss with verl head semantics and roll's 0-instead-of-NaN deviation (docs/algorithms.md §4, §9.9)."""

import math

import pytest
import torch

from roll.algorithms import agg_loss

X = [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 9.0, 9.0, 9.0]]
M = [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]  # last row empty
ROW_SUMS, ROW_COUNTS = [3.0, 26.0, 0.0], [2.0, 4.0, 0.0]


def run(mode, x=X, m=M, dtype=torch.float32, **kw):
    return agg_loss(torch.tensor(x, dtype=dtype), torch.tensor(m, dtype=dtype), mode, **kw)


def test_token_mean():
    assert run("token-mean").item() == pytest.approx(29.0 / 6.0)


def test_token_mean_global_count_and_dp_size():
    assert run("token-mean", dp_size=4, batch_num_tokens=24).item() == pytest.approx(29.0 / 24.0 * 4)


def test_seq_mean_token_sum_excludes_empty_rows():
    assert run("seq-mean-token-sum").item() == pytest.approx((3.0 + 26.0) / 2)
    assert run("seq-mean-token-sum", dp_size=2, global_batch_size=8).item() == pytest.approx(29.0 / 8 * 2)


def test_seq_mean_token_mean_excludes_empty_rows_with_row_eps():
    got = run("seq-mean-token-mean", dtype=torch.float64).item()
    want = (3.0 / (2 + 1e-8) + 26.0 / (4 + 1e-8)) / 2
    assert got == pytest.approx(want, rel=1e-14)
    assert got != (1.5 + 6.5) / 2  # the 1e-8 is visible in float64
    got = run("seq-mean-token-mean", dp_size=3, global_batch_size=6).item()
    assert got == pytest.approx((1.5 + 6.5) / 6 * 3)


def test_seq_mean_token_sum_norm_divides_by_padded_length_without_dp():
    assert run("seq-mean-token-sum-norm").item() == pytest.approx(29.0 / 4)
    assert run("seq-mean-token-sum-norm", dp_size=8).item() == pytest.approx(29.0 / 4)
    assert run("seq-mean-token-sum-norm", loss_scale_factor=10.0).item() == pytest.approx(2.9)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_nothing_valid_gives_zero_not_nan_and_a_zero_gradient(mode):
    x = torch.tensor([[1.0, float("nan")], [float("inf"), 2.0]], requires_grad=True)
    loss = agg_loss(x, torch.zeros(2, 2), mode)
    assert loss.item() == 0.0
    loss.backward()
    assert x.grad.abs().sum().item() == 0.0


def test_explicit_counts_apply_the_formula_even_when_nothing_is_valid():
    x, m = torch.ones(2, 2), torch.zeros(2, 2)
    assert agg_loss(x, m, "token-mean", batch_num_tokens=10).item() == 0.0
    assert agg_loss(x, m, "seq-mean-token-mean", global_batch_size=4).item() == 0.0


def test_nan_on_padding_does_not_leak():
    x = [[1.0, float("nan")], [2.0, 3.0]]
    m = [[1.0, 0.0], [1.0, 1.0]]
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert not math.isnan(run(mode, x, m).item())


def test_gradient_of_token_mean_is_mask_over_count():
    x = torch.tensor(X, requires_grad=True)
    agg_loss(x, torch.tensor(M), "token-mean").backward()
    assert x.grad.tolist() == [pytest.approx([v / 6.0 for v in row]) for row in M]


def test_unknown_mode_lists_valid_modes():
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        run("sequence-mean")


def test_inputs_not_modified():
    x, m = torch.tensor(X), torch.tensor(M)
    x0, m0 = x.clone(), m.clone()
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        agg_loss(x, m, mode)
    assert torch.equal(x, x0) and torch.equal(m, m0)
