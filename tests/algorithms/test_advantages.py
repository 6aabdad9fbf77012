"""Outcome and GAE advantage estimators (docs/algorithms.md §2, §9.2–9.6)."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from roll.algorithms import (
    compute_gae_advantage_return,
    compute_gpg_outcome_advantage,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_grpo_vectorized_outcome_advantage,
    compute_opo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_rloo_vectorized_outcome_advantage,
)
from tests.algorithms import plain_reference as ref


class AttrDict(dict):
    """A dict that also allows attribute access (one of the config kinds docs/algorithms.md §2 allows)."""

    __getattr__ = dict.get


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def approx_rows(rows, **kw):
    return [pytest.approx(r, **kw) for r in rows]


# Scores 1, 0.5, 2, 5, 3, 3 (row 1's reward sits on padding: scores sum all positions, so it counts).
REWARDS = [[0, 0, 1], [0, 0, 0.5], [0, 1, 1], [5, 0, 0], [0, 0, 3], [1, 2, 0]]
MASK = [[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 1]]
INDEX = np.array(["a", "a", "a", "s", "b", "b"], dtype=object)  # "s" is a singleton, "b" a tie
SCORES = [sum(r) for r in REWARDS]


def outcome(per_row):
    return ref.broadcast(per_row, MASK)


# ---------------------------------------------------------------- GAE


def plain_gae(r, v, m, gamma, lam):
    raw = []
    for rr, vr, mr in zip(r, v, m):
        next_v, last_a, out = 0.0, 0.0, [0.0] * len(rr)
        for step in reversed(range(len(rr))):
            a = rr[step] + gamma * next_v - vr[step] + gamma * lam * last_a
            if mr[step]:
                next_v, last_a = vr[step], a
            out[step] = last_a
        raw.append(out)
    return raw


def test_gae_gap_applies_gamma_once_by_hand():
    r, v, m = [[0.0, 0.0, 1.0, 0.0]], [[0.5, 9.0, 0.25, 7.0]], [[1.0, 0.0, 1.0, 0.0]]
    # t=2: A=1-0.25=0.75; t=1 masked: carries 0.75; t=0: -0.5+0.9*0.25 + 0.72*0.75 = 0.265
    raw = [0.265, 0.75, 0.75, 0.0]
    adv, ret = compute_gae_advantage_return(t(r), t(v), t(m), gamma=0.9, lam=0.8)
    assert ret[0].tolist() == pytest.approx([a + b for a, b in zip(raw, v[0])], abs=1e-6)
    assert adv.tolist() == approx_rows(ref.whiten([raw], m), abs=1e-4)


def test_gae_matches_loop_reference_and_is_not_remasked():
    g = torch.Generator().manual_seed(1)
    r, v = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    m = t([[1, 1, 1, 0, 0, 0], [1, 0, 1, 1, 0, 1], [1, 1, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0]])
    adv, ret = compute_gae_advantage_return(r, v, m, gamma=0.95, lam=0.9)
    raw = plain_gae(r.tolist(), v.tolist(), m.tolist(), 0.95, 0.9)
    assert ret.tolist() == approx_rows([[a + b for a, b in zip(x, y)] for x, y in zip(raw, v.tolist())], abs=1e-5)
    assert adv.tolist() == approx_rows(ref.whiten(raw, m.tolist()), abs=1e-4)
    assert adv[0, 4].item() != 0.0  # padding is whitened too (not re-masked)


# ---------------------------------------------------------------- GRPO


def plain_grpo(norm, eps=1e-6):
    out = [0.0] * len(SCORES)
    for rows in ref.groups(list(INDEX)).values():
        s = [SCORES[i] for i in rows]
        mu, sd = (ref.mean(s), ref.stdev(s)) if len(rows) > 1 else (0.0, 1.0)
        for i in rows:
            out[i] = (SCORES[i] - mu) / (sd + eps) if norm else SCORES[i] - mu
    return out


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_loop(norm):
    adv, ret = compute_grpo_outcome_advantage(t(REWARDS), t(MASK), INDEX, norm_adv_by_std_in_grpo=norm)
    assert adv.tolist() == approx_rows(outcome(plain_grpo(norm)), abs=1e-5)
    assert torch.equal(adv, ret)
    # singleton: s/(1+ε) or s; tie group: 0; score counts the reward on a masked position
    assert adv[3, 0].item() == pytest.approx(5.0 / (1 + 1e-6) if norm else 5.0, rel=1e-7)
    assert adv[4].abs().sum().item() == 0.0


def test_grpo_eps_is_added_to_the_std():
    rewards, index = t([[1.0], [1.001]]), ["g", "g"]
    sd = ref.stdev([1.0, 1.001])
    adv, _ = compute_grpo_outcome_advantage(rewards, torch.ones(2, 1), index, epsilon=1e-2)
    assert adv[:, 0].tolist() == pytest.approx([-0.0005 / (sd + 1e-2), 0.0005 / (sd + 1e-2)], rel=1e-3)


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_vectorized_equals_loop_on_ordinary_groups(norm):
    loop, _ = compute_grpo_outcome_advantage(t(REWARDS), t(MASK), INDEX, norm_adv_by_std_in_grpo=norm)
    vec, _ = compute_grpo_vectorized_outcome_advantage(t(REWARDS), t(MASK), INDEX, norm_adv_by_std_in_grpo=norm)
    assert torch.allclose(loop, vec, atol=1e-5)


def test_grpo_vectorized_floors_variance_for_near_constant_groups():
    rewards, mask, index = t([[0.0], [1e-4]]), torch.ones(2, 1), ["g", "g"]
    loop, _ = compute_grpo_outcome_advantage(rewards, mask, index)
    vec, _ = compute_grpo_vectorized_outcome_advantage(rewards, mask, index)
    sd = ref.stdev([0.0, 1e-4])  # 7.07e-5, its variance 5e-9 < ε
    assert loop[1, 0].item() == pytest.approx(5e-5 / (sd + 1e-6), rel=1e-3)
    assert vec[1, 0].item() == pytest.approx(5e-5 / (1e-3 + 1e-6), rel=1e-3)  # σ = sqrt(ε) = 1e-3
    assert loop[1, 0].item() > 10 * vec[1, 0].item()


def test_grpo_vectorized_singleton_is_raw_score_over_one_plus_eps():
    vec, _ = compute_grpo_vectorized_outcome_advantage(t([[2.0], [4.0]]), torch.ones(2, 1), ["x", "y"])
    assert vec[:, 0].tolist() == pytest.approx([2.0 / (1 + 1e-6), 4.0 / (1 + 1e-6)])


# ---------------------------------------------------------------- pass@k


PK_REWARDS, PK_INDEX = [[1.0], [3.0], [0.5], [2.0], [2.0], [1.0]], ["p", "p", "p", "q", "q", "q"]


def test_passk_only_the_winner_gets_top_minus_second():
    adv, ret = compute_grpo_passk_outcome_advantage(t(PK_REWARDS), torch.ones(6, 1), PK_INDEX)
    sd = ref.stdev([1.0, 3.0, 0.5])
    assert adv[:, 0].tolist() == pytest.approx([0, 2.0 / (sd + 1e-6), 0, 0, 0, 0], rel=1e-6)  # tie → 0
    assert torch.equal(adv, ret)


@pytest.mark.parametrize(
    "config",
    [
        {"norm_adv_by_std_in_grpo": False},
        AttrDict(norm_adv_by_std_in_grpo=False),
        OmegaConf.create({"norm_adv_by_std_in_grpo": False}),
    ],
)
def test_passk_reads_norm_flag_from_config_only(config):
    adv, _ = compute_grpo_passk_outcome_advantage(t(PK_REWARDS), torch.ones(6, 1), PK_INDEX, config=config)
    assert adv[1, 0].item() == pytest.approx(2.0)
    # the argument of the same name is ignored: config=None means normalise
    adv, _ = compute_grpo_passk_outcome_advantage(
        t(PK_REWARDS), torch.ones(6, 1), PK_INDEX, norm_adv_by_std_in_grpo=False
    )
    assert adv[1, 0].item() == pytest.approx(2.0 / (ref.stdev([1.0, 3.0, 0.5]) + 1e-6), rel=1e-6)


def test_passk_requires_two_samples_per_group():
    with pytest.raises(ValueError):
        compute_grpo_passk_outcome_advantage(t([[1.0], [2.0], [3.0]]), torch.ones(3, 1), ["a", "a", "b"])


# ---------------------------------------------------------------- RLOO, OPO


def test_rloo_loop_leave_one_out_and_raw_singleton():
    adv, ret = compute_rloo_outcome_advantage(t(REWARDS), t(MASK), INDEX)
    want = []
    for i, uid in enumerate(INDEX):
        others = [SCORES[j] for j in range(len(SCORES)) if INDEX[j] == uid and j != i]
        want.append(SCORES[i] - ref.mean(others) if others else SCORES[i])
    assert adv.tolist() == approx_rows(outcome(want), abs=1e-5)
    assert torch.equal(adv, ret)
    assert adv[3, 0].item() == 5.0


def test_rloo_vectorized_equal_except_singletons_which_are_zero():
    loop, _ = compute_rloo_outcome_advantage(t(REWARDS), t(MASK), INDEX)
    vec, _ = compute_rloo_vectorized_outcome_advantage(t(REWARDS), t(MASK), INDEX)
    multi = [i for i, uid in enumerate(INDEX) if uid != "s"]
    assert torch.allclose(loop[multi], vec[multi], atol=1e-5)
    assert vec[3].abs().sum().item() == 0.0 and loop[3, 0].item() == 5.0


def test_opo_length_weighted_baseline():
    adv, _ = compute_opo_outcome_advantage(t(REWARDS), t(MASK), INDEX)
    # group a: lengths 3, 2, 3, scores 1, 0.5, 2 → b = (3 + 1 + 6) / 8
    b = 10.0 / 8.0
    assert adv[:3, 0].tolist() == pytest.approx([1 - b, 0.5 - b, 2 - b])
    assert adv[3, 0].item() == 5.0  # singleton: baseline 0
    assert adv[1, 2].item() == 0.0


# ---------------------------------------------------------------- REINFORCE++


def plain_rfpp_returns(r, m, gamma):
    out = []
    for rr, mr in zip(r, m):
        g, row = 0.0, [0.0] * len(rr)
        for step in reversed(range(len(rr))):
            nxt = mr[step + 1] if step + 1 < len(rr) else 0.0
            g = rr[step] + gamma * nxt * g
            row[step] = g
        out.append(row)
    return out


def test_reinforce_pp_reset_rule_by_hand():
    r, m = [[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 1.0, 0.0]], [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]]
    adv, ret = compute_reinforce_plus_plus_outcome_advantage(t(r), t(m), config={"gamma": 0.5})
    # row 0: G3=4, G2=3+0.5*4=5, G1 (masked)=2+0.5*5=4.5, G0=1 (chain cut after masked t=1)
    assert ret[0].tolist() == pytest.approx([1.0, 4.5, 5.0, 4.0])
    assert ret.tolist() == approx_rows(plain_rfpp_returns(r, m, 0.5))
    want = [[a * w for a, w in zip(xr, mr)] for xr, mr in zip(ref.whiten(plain_rfpp_returns(r, m, 0.5), m), m)]
    assert adv.tolist() == approx_rows(want, abs=1e-5)
    assert adv[0, 1].item() == 0.0 and ret[0, 1].item() != 0.0  # advantages re-masked, returns not


@pytest.mark.parametrize("config", [None, {}, OmegaConf.create({"lam": 0.3})])
def test_reinforce_pp_gamma_defaults_to_one(config):
    r, m = [[1.0, 2.0, 3.0]], [[1.0, 1.0, 1.0]]
    _, ret = compute_reinforce_plus_plus_outcome_advantage(t(r), t(m), config=config)
    assert ret[0].tolist() == pytest.approx([6.0, 5.0, 3.0])


def test_reinforce_pp_baseline_token_weighted_whitening():
    adv, ret = compute_reinforce_plus_plus_baseline_outcome_advantage(t(REWARDS), t(MASK), INDEX)
    centred = list(SCORES)
    for rows in ref.groups(list(INDEX)).values():
        if len(rows) > 1:
            mu = ref.mean([SCORES[i] for i in rows])
            for i in rows:
                centred[i] = SCORES[i] - mu
    x = outcome(centred)
    want = [[a * w for a, w in zip(xr, mr)] for xr, mr in zip(ref.whiten(x, MASK), MASK)]
    assert adv.tolist() == approx_rows(want, abs=1e-5)
    assert torch.equal(adv, ret)


# ---------------------------------------------------------------- ReMax, GPG


def test_remax_reverse_cumsum_minus_baseline():
    r, m, b = [[1.0, 2.0, 4.0], [3.0, 5.0, 7.0]], [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], [0.5, 2.0]
    adv, ret = compute_remax_outcome_advantage(t(r), t(b), t(m))
    assert ret.tolist() == approx_rows([[7.0, 6.0, 4.0], [8.0, 5.0, 0.0]])
    assert adv.tolist() == approx_rows([[6.5, 5.5, 3.5], [6.0, 3.0, 0.0]])


def test_gpg_alpha_recomputed_from_batch_and_f_norm():
    # scores 1, 0, 2 | 0, 3 | 4: 4 of 6 non-zero → α = 6/4 (the alpha argument is ignored); singleton mean 0
    rewards, index = t([[1.0], [0.0], [2.0], [0.0], [3.0], [4.0]]), ["a", "a", "a", "b", "b", "s"]
    adv, _ = compute_gpg_outcome_advantage(rewards, torch.ones(6, 1), index, f_norm=2.0, alpha=100.0)
    want = [1.5 * (s - mu) / 2.0 for s, mu in zip([1, 0, 2, 0, 3, 4], [1, 1, 1, 1.5, 1.5, 0])]
    assert adv[:, 0].tolist() == pytest.approx(want)


def test_gpg_all_zero_scores():
    adv, _ = compute_gpg_outcome_advantage(torch.zeros(2, 2), torch.ones(2, 2), ["a", "a"])
    assert adv.abs().sum().item() == 0.0
