"""KL estimators, controllers and KL-in-reward (docs/algorithms.md §3, §9.7–9.8)."""

import math

import pytest
import torch
from omegaconf import OmegaConf

from roll.algorithms import AdaptiveKLController, FixedKLController, apply_kl_penalty, get_kl_controller, kl_penalty

D = [-25.0, -4.0, -0.7, 0.0, 0.3, 2.5, 25.0]  # d = logprob − ref_logprob


def plain_k3(d):
    e = min(max(-d, -20.0), 20.0)
    return min(max(math.exp(e) - e - 1, -10.0), 10.0)


PLAIN = {
    "kl": lambda d: d,
    "k1": lambda d: d,
    "abs": abs,
    "mse": lambda d: 0.5 * d * d,
    "k2": lambda d: 0.5 * d * d,
    "low_var_kl": plain_k3,
    "k3": plain_k3,
}


def grad_of(name, d_values):
    lp = torch.tensor(d_values, dtype=torch.float64, requires_grad=True)
    value = kl_penalty(lp, torch.zeros_like(lp), name)
    value.sum().backward()
    return value.detach(), lp.grad


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_estimator_values(name):
    lp, ref = torch.tensor([d + 1.5 for d in D], dtype=torch.float64), torch.full((len(D),), 1.5, dtype=torch.float64)
    assert kl_penalty(lp, ref, name).tolist() == pytest.approx([PLAIN[name](d) for d in D], rel=1e-9, abs=1e-9)


def test_k3_gradient_zero_where_a_clamp_is_active():
    _, grad = grad_of("k3", D)
    # d=-25 and 25: input clamp; d=-4: exp(4)-5 = 49.6 > 10 output clamp; elsewhere d/dd = 1 - exp(-d)
    for d, g in zip(D, grad.tolist()):
        clamped = abs(d) > 20 or math.exp(-d) + d - 1 > 10
        assert g == (0.0 if clamped else pytest.approx(1 - math.exp(-d)))
    assert plain_k3(25.0) == 10.0 and plain_k3(-25.0) == 10.0


@pytest.mark.parametrize("base", sorted(PLAIN))
def test_plus_variant_has_base_value_and_k2_gradient(base):
    value, grad = grad_of(base + "+", D)
    assert value.tolist() == pytest.approx([PLAIN[base](d) for d in D], rel=1e-9, abs=1e-9)
    assert grad.tolist() == pytest.approx(D)  # d(½d²)/dd = d, even where k3's clamps would cut it


def test_full_and_unknown_names_raise():
    x = torch.zeros(2)
    with pytest.raises(NotImplementedError):
        kl_penalty(x, x, "full")
    with pytest.raises(NotImplementedError, match="low_var_kl"):  # lists the valid names
        kl_penalty(x, x, "k4")
    with pytest.raises(NotImplementedError):
        kl_penalty(x, x, "k4+")


def test_fixed_controller():
    ctrl = FixedKLController(kl_coef=0.05)
    ctrl.update(current_kl=10.0, n_steps=100)
    assert ctrl.value == 0.05


@pytest.mark.parametrize("current_kl, error", [(0.11, 0.1), (1.0, 0.2), (0.0, -0.2), (0.09, -0.1)])
def test_adaptive_controller_step(current_kl, error):
    ctrl = AdaptiveKLController(init_kl_coef=0.2, target_kl=0.1, horizon=1000)
    ctrl.update(current_kl, n_steps=50)
    assert ctrl.value == pytest.approx(0.2 * (1 + error * 50 / 1000))


@pytest.mark.parametrize(
    "config",
    [
        {"type": "adaptive", "kl_coef": 0.3, "target_kl": 0.5, "horizon": 10},
        OmegaConf.create({"type": "adaptive", "kl_coef": 0.3, "target_kl": 0.5, "horizon": 10}),
        type("Cfg", (), {"type": "adaptive", "kl_coef": 0.3, "target_kl": 0.5, "horizon": 10})(),
    ],
)
def test_get_kl_controller_adaptive(config):
    ctrl = get_kl_controller(config)
    assert isinstance(ctrl, AdaptiveKLController)
    assert (ctrl.value, ctrl.target, ctrl.horizon) == (0.3, 0.5, 10)


def test_get_kl_controller_defaults_and_errors():
    ctrl = get_kl_controller({"type": "fixed"})
    assert isinstance(ctrl, FixedKLController) and ctrl.value == 0.001
    with pytest.raises(ValueError):
        get_kl_controller({"type": "adaptive", "kl_coef": 0.1, "target_kl": 0.1, "horizon": 0})
    with pytest.raises(ValueError, match="fixed"):
        get_kl_controller({"type": "pid"})


def test_apply_kl_penalty_uses_pre_update_beta_and_updates_controller():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0], [0.0, 0.0, 0.0]])
    old = torch.tensor([[0.2, -0.1, 0.5], [0.0, 0.3, 9.0], [1.0, 1.0, 1.0]])
    ref_lp = torch.tensor([[0.0, 0.1, 0.1], [0.1, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # last row empty
    inputs = [x.clone() for x in (scores, old, ref_lp, mask)]
    ctrl = AdaptiveKLController(init_kl_coef=0.5, target_kl=0.1, horizon=30)
    rewards, metrics = apply_kl_penalty(scores, old, ref_lp, mask, ctrl, kl_penalty="kl")
    kld = [[(o - r) * m for o, r, m in zip(*rows)] for rows in zip(old.tolist(), ref_lp.tolist(), mask.tolist())]
    want = [[s - 0.5 * k for s, k in zip(sr, kr)] for sr, kr in zip(scores.tolist(), kld)]
    assert rewards.tolist() == [pytest.approx(r, abs=1e-6) for r in want]
    row_means = [sum(kr) / (sum(mr) + 1e-8) for kr, mr in zip(kld, mask.tolist())]  # empty row → 0
    current = sum(row_means) / 3
    assert metrics == {
        "actor/reward_kl_penalty": pytest.approx(current, rel=1e-5),
        "actor/reward_kl_penalty_coeff": 0.5,
    }
    assert all(type(v) is float for v in metrics.values())
    error = max(min(current / 0.1 - 1, 0.2), -0.2)
    assert ctrl.value == pytest.approx(0.5 * (1 + error * 3 / 30))
    assert all(torch.equal(a, b) for a, b in zip(inputs, (scores, old, ref_lp, mask)))


def test_apply_kl_penalty_with_k3_and_plus_variant():
    old, ref_lp, mask = torch.tensor([[0.4, -0.3]]), torch.tensor([[0.0, 0.0]]), torch.ones(1, 2)
    expected = [-plain_k3(0.4) * 0.1, -plain_k3(-0.3) * 0.1]
    for name in ("k3", "k3+"):
        rewards, _ = apply_kl_penalty(torch.zeros(1, 2), old, ref_lp, mask, FixedKLController(0.1), kl_penalty=name)
        assert rewards[0].tolist() == pytest.approx(expected, rel=1e-5)
