"""The six kd_objectives per position (docs/algorithms.md §13.4), by hand, with −inf entries (finite gradients,
where ROLL's give NaN) and adaptive_kl at a zero gap (½ / ½, where ROLL gives NaN)."""

import math

import pytest
import torch

from roll.algorithms import KD_OBJECTIVES, get_kd_objective

ln = math.log
NAMES = ["adaptive_kl", "forward_kl", "js_divergence", "reverse_kl", "skewed_forward_kl", "skewed_reverse_kl"]


def teacher(probs):
    p = torch.tensor(probs, dtype=torch.float64)
    return p, p.log(), p == 0


def run(name, student_logits, probs, **options):
    p, lp, inf = teacher(probs)
    z = torch.tensor(student_logits, dtype=torch.float64, requires_grad=True)
    value = get_kd_objective(name)(z, p, lp, inf, **options)
    (grad,) = torch.autograd.grad(value, z)
    return value.item(), grad


def test_registry():
    assert sorted(KD_OBJECTIVES) == NAMES
    with pytest.raises(ValueError, match="valid"):
        get_kd_objective("kl")


# p = (3/4, 1/4), student logits (0, 0) → q = (1/2, 1/2)
P, Z = [0.75, 0.25], [0.0, 0.0]
EXPECTED = {
    "forward_kl": 0.75 * ln(1.5) + 0.25 * ln(0.5),
    "reverse_kl": 0.5 * ln(0.5 / 0.75) + 0.5 * ln(0.5 / 0.25),
    # m = 0.1 p + 0.9 q = (0.525, 0.475)
    "skewed_forward_kl": 0.75 * ln(0.75 / 0.525) + 0.25 * ln(0.25 / 0.475),
    # m = 0.9 p + 0.1 q = (0.725, 0.275)
    "skewed_reverse_kl": 0.5 * ln(0.5 / 0.725) + 0.5 * ln(0.5 / 0.275),
    # m = (0.625, 0.375)
    "js_divergence": 0.5
    * (0.75 * ln(0.75 / 0.625) + 0.25 * ln(0.25 / 0.375) + 0.5 * ln(0.5 / 0.625) + 0.5 * ln(0.5 / 0.375)),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_values_by_hand(name):
    value, _ = run(name, Z, P, skew_lambda=0.1)
    assert value == pytest.approx(EXPECTED[name], rel=1e-7, abs=1e-8)


def test_temperature_divides_the_student_logits():
    # z = (2 ln 3, 0) at τ = 2 → q = (3/4, 1/4) = p: FKL 0
    value, _ = run("forward_kl", [2 * ln(3), 0.0], P, kd_temperature=2.0)
    assert value == pytest.approx(0.0, abs=1e-12)


def test_forward_kl_gradient_is_q_minus_p():
    _, grad = run("forward_kl", Z, P)
    torch.testing.assert_close(grad, torch.tensor([0.5 - 0.75, 0.5 - 0.25], dtype=torch.float64))


def test_adaptive_kl_weights_by_hand():
    # p = (.4, .3, .2, .1), q uniform. Ascending p: (.1, .2, .3, .4), gap (.15, .05, .05, .15),
    # cumsum (.1, .3, .6, 1) ≤ α = .15 → tail = first entry: g_tail = .15, g_head = .25
    p = [0.4, 0.3, 0.2, 0.1]
    fkl = sum(pi * ln(pi / 0.25) for pi in p)
    rkl = sum(0.25 * ln(0.25 / pi) for pi in p)
    value, _ = run("adaptive_kl", [0.0] * 4, p, adaptive_kl_alpha=0.15)
    assert value == pytest.approx(0.625 * fkl + 0.375 * rkl, rel=1e-7)


def test_adaptive_kl_at_a_zero_gap_is_zero_with_zero_gradient():
    # q = p exactly: g_head + g_tail = 0 → ROLL's weights are 0/0 = NaN; here ½ / ½ of FKL = RKL = 0
    value, grad = run("adaptive_kl", [0.0, 0.0], [0.5, 0.5])
    assert value == 0.0
    assert torch.equal(grad, torch.zeros(2, dtype=torch.float64))
    # in a batch: the other position keeps its value and gradient
    p = torch.tensor([[0.5, 0.5], [0.75, 0.25]], dtype=torch.float64)
    z = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    values = get_kd_objective("adaptive_kl")(z, p, p.log(), p == 0)
    values.sum().backward()
    assert values[0].item() == 0.0 and torch.isfinite(z.grad).all()
    # second position: ascending p (.25, .75), gap (.25, .25), cumsum (.25, 1) ≤ .5 → tail first: ½ / ½
    assert values[1].item() == pytest.approx(0.5 * EXPECTED["forward_kl"] + 0.5 * EXPECTED["reverse_kl"])


# Teacher top-k with a −inf entry: p = (3/4, 1/4, 0), ℓ = (ln ¾, ln ¼, −inf), mask (F, F, T);
# student logits (0, 0, 0) → q = (⅓, ⅓, ⅓): the third entry is in the normaliser but not in the sum.
Q = 1 / 3
MASKED_VALUES = {
    "forward_kl": 0.75 * ln(0.75 / Q) + 0.25 * ln(0.25 / Q),
    "reverse_kl": Q * ln(Q / 0.75) + Q * ln(Q / 0.25),
    "skewed_forward_kl": 0.75 * ln(0.75 / (0.075 + 0.9 * Q)) + 0.25 * ln(0.25 / (0.025 + 0.9 * Q)),
    "skewed_reverse_kl": Q * ln(Q / (0.675 + 0.1 * Q)) + Q * ln(Q / (0.225 + 0.1 * Q)),
    "js_divergence": 0.5
    * (
        0.75 * ln(0.75 / ((0.75 + Q) / 2))
        + 0.25 * ln(0.25 / ((0.25 + Q) / 2))
        + Q * ln(Q / ((0.75 + Q) / 2))
        + Q * ln(Q / ((0.25 + Q) / 2))
    ),
}


@pytest.mark.parametrize("name", sorted(MASKED_VALUES))
def test_teacher_inf_entries_contribute_nothing(name):
    value, grad = run(name, [0.0, 0.0, 0.0], [0.75, 0.25, 0.0], skew_lambda=0.1)
    assert value == pytest.approx(MASKED_VALUES[name], rel=1e-7)
    assert torch.isfinite(grad).all()


def test_reverse_kl_gradient_with_a_teacher_inf_entry_by_hand():
    # R = Σ_{j∈U} q_j (ln q_j − ℓ_j); dR/dz_k = q_k a_k [k∈U] − q_k Σ_{j∈U} q_j a_j, a_j = ln q_j − ℓ_j + 1
    a0, a1 = ln(Q / 0.75) + 1, ln(Q / 0.25) + 1
    s = Q * (a0 + a1)
    _, grad = run("reverse_kl", [0.0, 0.0, 0.0], [0.75, 0.25, 0.0])
    torch.testing.assert_close(grad, torch.tensor([Q * a0 - Q * s, Q * a1 - Q * s, -Q * s], dtype=torch.float64))


def test_roll_formula_gives_nan_gradients_there():
    # the quirk this project corrects: masking the value after computing q·(ℓ_q − ℓ) with ℓ = −inf
    p, lp, inf = teacher([0.75, 0.25, 0.0])
    z = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    lq = torch.log_softmax(z, -1)
    (lq.exp() * (lq - lp)).masked_fill(inf, 0.0).sum().backward()
    assert torch.isnan(z.grad).all()


@pytest.mark.parametrize("name", NAMES)
def test_student_inf_entries_and_gradcheck(name):
    # a student −inf logit (e.g. a masked vocabulary entry) and a teacher −inf entry at another position
    p = torch.tensor([[0.5, 0.3, 0.2], [0.6, 0.4, 0.0]], dtype=torch.float64)
    inf = p == 0
    z = torch.tensor([[0.3, -0.2, float("-inf")], [0.1, 0.7, -0.4]], dtype=torch.float64, requires_grad=True)
    fn = get_kd_objective(name)
    values = fn(z, p, p.log(), inf)
    values.sum().backward()
    assert torch.isfinite(values).all() and torch.isfinite(z.grad).all()
    assert z.grad[0, 2] == 0
    finite = torch.tensor([[0.3, -0.2], [0.1, 0.7]], dtype=torch.float64, requires_grad=True)

    def on_finite(x):
        full = torch.cat([x, torch.tensor([[float("-inf")], [-0.4]], dtype=torch.float64)], dim=-1)
        return fn(full, p, p.log(), inf)

    if name != "adaptive_kl":  # its weights are detached on purpose: checked below against FKL / RKL
        assert torch.autograd.gradcheck(on_finite, (finite,))


def test_adaptive_kl_gradient_holds_the_weights_fixed():
    # p = (.4, .3, .2, .1), q uniform, α = .15: weights .625 / .375 (test_adaptive_kl_weights_by_hand)
    p = [0.4, 0.3, 0.2, 0.1]
    _, grad = run("adaptive_kl", [0.0] * 4, p, adaptive_kl_alpha=0.15)
    _, fkl = run("forward_kl", [0.0] * 4, p)
    _, rkl = run("reverse_kl", [0.0] * 4, p)
    torch.testing.assert_close(grad, 0.625 * fkl + 0.375 * rkl)


def test_student_inf_entry_value_by_hand():
    # q = (½, ½, 0), p = (.5, .3, .2): the third entry is masked, p is not renormalised
    value, _ = run("forward_kl", [0.0, 0.0, float("-inf")], [0.5, 0.3, 0.2])
    assert value == pytest.approx(0.3 * ln(0.3 / 0.5))
