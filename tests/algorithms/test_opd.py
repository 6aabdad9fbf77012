"""On-policy distillation: kl_penalty kinds, teachers with routing and coefficients, pure and mixed advantages,
whitening and advantage clip (docs/algorithms.md §13.5), by hand."""

import math

import pytest
import torch

from roll.algorithms import OPD_KL_PENALTIES, get_adv_estimator_fn, opd_advantages, opd_kl_penalty, opd_teacher_kl

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
S = torch.tensor([[-1.0, -2.0, -9.0], [-1.0, -1.0, -1.0]])  # the student's log-probs of its tokens
REF_A = torch.tensor([[-2.0, -2.0, 0.0], [-1.5, -0.5, -1.0]])  # d = S − REF_A = [[1, 0, −9], [.5, −.5, 0]]


def k3(d):  # ROLL's k3: clamp(exp(ref − s) − (ref − s) − 1, −10, 10)
    return min(max(math.exp(-d) + d - 1, -10.0), 10.0)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("kl", [[1.0, 0.0, 0.0], [0.5, -0.5, 0.0]]),
        ("abs", [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]),
        ("mse", [[0.5, 0.0, 0.0], [0.125, 0.125, 0.0]]),
        ("k3", [[k3(1.0), 0.0, 0.0], [k3(0.5), k3(-0.5), 0.0]]),
    ],
)
def test_kl_penalty_kinds_masked(name, expected):
    total, per_teacher = opd_teacher_kl(S, {"default": REF_A}, MASK, name)
    torch.testing.assert_close(total, torch.tensor(expected))
    assert total.dtype == torch.float32 and list(per_teacher) == ["default"]


def test_k3_equals_rolls_formula_far_out():
    d = torch.tensor([-25.0, -2.0, 0.3, 3.0, 25.0], dtype=torch.float64)
    assert opd_kl_penalty(d, torch.zeros_like(d), "k3").tolist() == pytest.approx([k3(x) for x in d.tolist()])


def test_full_and_other_names_are_refused():
    assert OPD_KL_PENALTIES == ("kl", "abs", "mse", "k3")
    with pytest.raises(ValueError, match="'full' needs full-vocabulary"):
        opd_teacher_kl(S, {"default": REF_A}, MASK, "full")
    with pytest.raises(ValueError, match="valid"):
        opd_kl_penalty(S, REF_A, "low_var_kl")


def two_teachers():
    # teacher a: row 0 only, coef 0.5; teacher b: every row, coef None → 1.0, d = 1 everywhere
    refs = {"a": REF_A, "b": S - 1.0}
    return opd_teacher_kl(
        S, refs, MASK, "kl", kl_coefs={"a": 0.5, "b": None}, row_masks={"a": torch.tensor([True, False]), "b": None}
    )


def test_teachers_routing_and_coefficients():
    total, per_teacher = two_teachers()
    torch.testing.assert_close(per_teacher["a"], torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    torch.testing.assert_close(per_teacher["b"], MASK)
    torch.testing.assert_close(total, torch.tensor([[1.5, 1.0, 0.0], [1.0, 1.0, 1.0]]))
    with pytest.raises(ValueError, match=r"kl_coefs names \['c'\]"):
        opd_teacher_kl(S, {"a": REF_A}, MASK, kl_coefs={"c": 1.0})


def test_pure_mode():
    total, _ = two_teachers()
    out = opd_advantages(total, MASK)
    expected = torch.tensor([[-1.5, -1.0, 0.0], [-1.0, -1.0, -1.0]])
    torch.testing.assert_close(out.advantages, expected)
    torch.testing.assert_close(out.returns, expected)
    torch.testing.assert_close(out.raw_advantages, expected)
    assert out.metrics == {}


def test_pure_mode_whitened_and_clipped():
    total, _ = two_teachers()
    # valid values (−1.5, −1, −1, −1, −1): mean −1.1, Σ(x − μ)² = .16 + 4·.01 = .2, unbiased var .2/4 = .05
    out = opd_advantages(total, MASK, whiten_advantages=True, advantage_clip=0.8)
    lo, hi = -0.4 / math.sqrt(0.05), 0.1 / math.sqrt(0.05)  # −1.789 (clipped), 0.447
    torch.testing.assert_close(out.advantages, torch.tensor([[-0.8, hi, 0.0], [hi, hi, hi]]))
    assert lo < -0.8 and out.metrics == {"critic/advantage_clip_frac": pytest.approx(1 / 6)}  # of all 6 entries
    # returns are −KL before whitening / clipping
    torch.testing.assert_close(out.returns, -total)


def test_whitening_off_with_at_most_one_token():
    one = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    kl = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    out = opd_advantages(kl, one, whiten_advantages=True)
    torch.testing.assert_close(out.advantages, -kl)


def test_mixed_mode_after_the_rl_estimator():
    total, _ = two_teachers()
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    # ROLL's reinforce: rewards·m, reward-to-go with γ = 1, masked: [[1, 1, 0], [2, 2, 2]]
    rl_adv, rl_ret = get_adv_estimator_fn("reinforce")(token_level_rewards=rewards, response_mask=MASK, gamma=1.0)
    torch.testing.assert_close(rl_adv, torch.tensor([[1.0, 1.0, 0.0], [2.0, 2.0, 2.0]]))
    out = opd_advantages(total, MASK, rl_adv, rl_ret)
    torch.testing.assert_close(out.advantages, torch.tensor([[-0.5, 0.0, 0.0], [1.0, 1.0, 1.0]]))
    assert out.returns is rl_ret  # the KL is an advantage term, not part of the returns
    assert out.raw_advantages is rl_adv
