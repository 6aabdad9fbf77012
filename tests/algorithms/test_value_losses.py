"""Clipped value loss and entropy loss (docs/algorithms.md §6)."""

import math

import pytest
import torch

from roll.algorithms import compute_entropy_loss, compute_value_loss
from tests.algorithms import plain_reference as ref

VPREDS = [[1.0, 2.0, 0.3, 5.0], [0.0, -1.0, 4.0, 9.0]]
VALUES = [[1.2, 1.0, 0.0, 5.0], [0.4, 0.0, 3.0, 0.0]]
RETURNS = [[1.0, 3.0, -1.0, 0.0], [1.0, 0.0, 2.0, 0.0]]
MASK = [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
N_VALID = 7


def plain_token(v, old, ret, c):
    """(loss term, clipped branch strictly larger, d loss term / d v)."""
    vc = min(max(v, old - c), old + c)
    l1, l2 = (v - ret) ** 2, (vc - ret) ** 2
    use_clipped = l2 > l1
    # the clipped branch carries gradient only where v̂ is not itself clipped
    grad = (2 * (vc - ret) * (1.0 if old - c < v < old + c else 0.0)) if use_clipped else 2 * (v - ret)
    return max(l1, l2), float(use_clipped), grad


def tokens(c):
    return [[plain_token(*args, c) for args in zip(vr, orow, rr)] for vr, orow, rr in zip(VPREDS, VALUES, RETURNS)]


@pytest.mark.parametrize("cliprange", [0.5, 0.2])
def test_value_loss_value_clipfrac_and_gradient(cliprange):
    vpreds = torch.tensor(VPREDS, dtype=torch.float64, requires_grad=True)
    loss, clipfrac = compute_value_loss(
        vpreds,
        torch.tensor(RETURNS, dtype=torch.float64),
        torch.tensor(VALUES, dtype=torch.float64),
        torch.tensor(MASK, dtype=torch.float64),
        cliprange_value=cliprange,
    )
    per = tokens(cliprange)
    assert loss.item() == pytest.approx(0.5 * ref.token_mean([[p[0] for p in row] for row in per], MASK), rel=1e-12)
    assert clipfrac.item() == pytest.approx(ref.masked_mean([[p[1] for p in row] for row in per], MASK))
    assert 0.0 < clipfrac.item() < 1.0
    loss.backward()
    want = [[0.5 * p[2] * m / N_VALID for p, m in zip(row, mr)] for row, mr in zip(per, MASK)]
    assert vpreds.grad.tolist() == [pytest.approx(r, abs=1e-12) for r in want]


def test_value_loss_seq_mode_and_inputs_untouched():
    tensors = [torch.tensor(x, dtype=torch.float64) for x in (VPREDS, RETURNS, VALUES, MASK)]
    before = [x.clone() for x in tensors]
    loss, _ = compute_value_loss(*tensors, cliprange_value=0.5, loss_agg_mode="seq-mean-token-sum")
    per = tokens(0.5)
    rows = [sum(p[0] * m for p, m in zip(row, mr)) for row, mr in zip(per, MASK)]
    assert loss.item() == pytest.approx(0.5 * sum(rows) / 2, rel=1e-12)
    assert all(torch.equal(a, b) for a, b in zip(before, tensors))


def test_entropy_loss_aggregates_token_entropy():
    logits = [[[0.0, 1.0, 2.0], [5.0, 5.0, 5.0]], [[-1.0, 0.0, 3.0], [0.0, 0.0, 9.0]]]
    mask = [[1.0, 1.0], [1.0, 0.0]]

    def entropy(z):
        p = [math.exp(v) / sum(math.exp(u) for u in z) for v in z]
        return -sum(q * math.log(q) for q in p)

    ents = [[entropy(z) for z in row] for row in logits]
    got = compute_entropy_loss(torch.tensor(logits, dtype=torch.float64), torch.tensor(mask, dtype=torch.float64))
    assert got.item() == pytest.approx(ref.token_mean(ents, mask), rel=1e-12)
    got = compute_entropy_loss(
        torch.tensor(logits, dtype=torch.float64),
        torch.tensor(mask, dtype=torch.float64),
        loss_agg_mode="seq-mean-token-mean",
    )
    assert got.item() == pytest.approx(
        ((ents[0][0] + ents[0][1]) / (2 + 1e-8) + ents[1][0] / (1 + 1e-8)) / 2, rel=1e-12
    )
