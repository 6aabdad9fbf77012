"""Optimal token baseline (docs/algorithms.md §2.10)."""

import math

import pytest
import torch

from roll.algorithms import compute_optimal_token_baseline_advantage, get_adv_estimator_fn
from tests.algorithms import plain_reference as ref


def plain_otb(r, m, index, old, spp, rho=None, zero_tail=False, eps=1e-8):
    n_rows, n_cols = len(r), len(r[0])
    ret = [[sum(r[i][u] * m[i][u] for u in range(s, n_cols)) for s in range(n_cols)] for i in range(n_rows)]
    w = [[1 - 2 * math.exp(old[i][s]) + spp[i][s] for s in range(n_cols)] for i in range(n_rows)]
    if rho is not None:
        w = [[w[i][s] * rho[i][s] ** 2 for s in range(n_cols)] for i in range(n_rows)]
    cum = [[sum(w[i][u] * m[i][u] for u in range(s + 1)) for s in range(n_cols)] for i in range(n_rows)]
    base = [[0.0] * n_cols for _ in range(n_rows)]
    for rows in ref.groups(index).values():
        if len(rows) < 2:
            continue
        for s in range(n_cols):
            num = sum(ret[j][s] * cum[j][s] * m[j][s] for j in rows)
            den = sum(cum[j][s] * m[j][s] for j in rows)
            for j in rows:
                base[j][s] = num / (den + eps)
        if zero_tail:
            lengths = sorted(((sum(m[j]), j) for j in rows), reverse=True)
            if lengths[0][0] != lengths[1][0]:
                for s in range(int(lengths[1][0]), n_cols):
                    base[lengths[0][1]][s] = 0.0
    adv = [[(ret[i][s] - base[i][s]) * m[i][s] for s in range(n_cols)] for i in range(n_rows)]
    return adv, ret


R = [[0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0], [1.0, 0.0, 0.0, 0.0], [0.0, 3.0, 0.0, 0.0]]
M = [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
INDEX = ["g", "g", "g", "s", "h"]
OLD = [
    [math.log(p) for p in row]
    for row in [
        [0.5, 0.9, 0.2, 0.7],
        [0.3, 0.6, 0.8, 0.1],
        [0.4, 0.4, 0.9, 0.5],
        [0.6, 0.2, 0.3, 0.3],
        [0.1, 0.5, 0.7, 0.9],
    ]
]
SPP = [[0.4, 0.85, 0.3, 0.6], [0.2, 0.5, 0.7, 0.3], [0.3, 0.35, 0.82, 0.4], [0.5, 0.3, 0.4, 0.2], [0.2, 0.4, 0.6, 0.9]]


def run(**kw):
    args = [torch.tensor(x, dtype=torch.float64) for x in (R, M)]
    return compute_optimal_token_baseline_advantage(
        args[0], args[1], INDEX, torch.tensor(OLD, dtype=torch.float64), torch.tensor(SPP, dtype=torch.float64), **kw
    )


def test_small_case_by_hand():
    # π = 0.5, Σπ² = 0.5 → w = 0.5, W = [0.5, 1]; returns [1, 1] and [0, 0] → baseline 1/2 everywhere
    adv, ret = compute_optimal_token_baseline_advantage(
        torch.tensor([[0.0, 1.0], [0.0, 0.0]]),
        torch.ones(2, 2),
        ["g", "g"],
        torch.full((2, 2), math.log(0.5)),
        torch.full((2, 2), 0.5),
    )
    assert adv.tolist() == [pytest.approx([0.5, 0.5]), pytest.approx([-0.5, -0.5])]
    assert ret.tolist() == [[1.0, 1.0], [0.0, 0.0]]


@pytest.mark.parametrize("zero_tail", [False, True])
def test_matches_loop_reference(zero_tail):
    adv, ret = run(handle_zero_tail=zero_tail)
    want_adv, want_ret = plain_otb(R, M, INDEX, OLD, SPP, zero_tail=zero_tail)
    assert adv.tolist() == [pytest.approx(row, abs=1e-9) for row in want_adv]
    assert ret.tolist() == [pytest.approx(row, abs=1e-12) for row in want_ret]


def test_zero_tail_only_changes_the_unique_longest_beyond_second_length():
    plain, _ = run()
    tail, _ = run(handle_zero_tail=True)
    changed = (plain != tail).nonzero().tolist()
    # group g: lengths 3, 2, 4 → row 2 keeps its full return from column 3 (= second-longest length) on
    assert changed == [[2, 3]]
    assert tail[2, 3].item() == pytest.approx(2.0)


def test_zero_tail_tie_for_longest_zeroes_nothing():
    args = (
        torch.tensor([[0.0, 1.0], [0.0, 2.0]]),
        torch.ones(2, 2),
        ["g", "g"],
        torch.full((2, 2), -1.0),
        torch.full((2, 2), 0.3),
    )
    assert torch.equal(
        compute_optimal_token_baseline_advantage(*args)[0],
        compute_optimal_token_baseline_advantage(*args, handle_zero_tail=True)[0],
    )


def test_rollout_is_weights_enter_squared():
    rho = [[1.0, 2.0, 0.5, 1.0], [1.5, 0.2, 1.0, 1.0], [0.7, 1.1, 3.0, 0.9], [1.0] * 4, [2.0, 0.1, 1.0, 1.0]]
    adv, _ = run(rollout_is_weights=torch.tensor(rho, dtype=torch.float64))
    want, _ = plain_otb(R, M, INDEX, OLD, SPP, rho=rho)
    assert adv.tolist() == [pytest.approx(row, abs=1e-9) for row in want]
    assert not torch.allclose(adv, run()[0])


def test_singletons_keep_the_return_and_returns_are_not_masked():
    adv, ret = run()
    assert adv[3].tolist() == [1.0, 0.0, 0.0, 0.0]  # singleton: baseline 0
    assert ret[1, 2].item() == 0.0 and ret[3, 2].item() == 0.0
    # masked positions keep the valid rewards after them (none here) — and a reward on padding is ignored
    r = torch.tensor([[1.0, 5.0]])
    _, ret = compute_optimal_token_baseline_advantage(
        r, torch.tensor([[1.0, 0.0]]), ["x"], torch.zeros(1, 2), torch.ones(1, 2)
    )
    assert ret.tolist() == [[1.0, 0.0]]


def test_registered_and_accepts_config_kwargs():
    fn = get_adv_estimator_fn("optimal_token_baseline")
    assert fn is compute_optimal_token_baseline_advantage
    adv, _ = run(config={"gamma": 0.1}, unused_extra=1)
    assert torch.equal(adv, run()[0])
