"""KL estimators, KL controllers and KL-in-reward (docs/algorithms.md §3)."""

import numpy as np
import torch

from roll.algorithms._config import config_get
from roll.algorithms.reductions import masked_mean

__all__ = [
    "kl_penalty",
    "FixedKLController",
    "AdaptiveKLController",
    "get_kl_controller",
    "apply_kl_penalty",
    "KL_ESTIMATORS",
]

KL_ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def _k3(d: torch.Tensor) -> torch.Tensor:
    # Both clamps cut the gradient where active: exp overflow guard on the input, outlier cap on the output.
    e = torch.clamp(-d, min=-20, max=20)
    return torch.clamp(e.exp() - e - 1, min=-10, max=10)


def _kl_estimate(d: torch.Tensor, name: str) -> torch.Tensor:
    """Per-token estimate of KL(π‖π_ref) from d = log π − log π_ref."""
    if name in ("kl", "k1"):
        return d
    if name == "abs":
        return d.abs()
    if name in ("mse", "k2"):
        return 0.5 * d.square()
    if name in ("low_var_kl", "k3"):
        return _k3(d)
    if name == "full":
        raise NotImplementedError("kl_penalty 'full' needs full-vocabulary log-probs, which this API does not take")
    valid = list(KL_ESTIMATORS) + [f"{k}+" for k in KL_ESTIMATORS]
    raise NotImplementedError(f"unknown kl_penalty {name!r}; valid: {valid}")


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate. A trailing '+' (e.g. 'k3+') gives the base estimator's value with the k2
    gradient (straight-through). verl documents this but raises for it; roll makes it work."""
    d = logprob - ref_logprob
    if not kl_penalty.endswith("+"):
        return _kl_estimate(d, kl_penalty)
    value, k2 = _kl_estimate(d, kl_penalty[:-1]), 0.5 * d.square()
    return k2 - k2.detach() + value.detach()


class FixedKLController:
    """Constant KL coefficient."""

    def __init__(self, kl_coef: float):
        self.value = kl_coef

    def update(self, current_kl, n_steps) -> None:
        pass


class AdaptiveKLController:
    """Proportional controller steering the observed KL towards `target_kl` (Ziegler et al. 2019)."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        self.value, self.target, self.horizon = init_kl_coef, target_kl, horizon

    def update(self, current_kl, n_steps) -> None:
        error = float(np.clip(current_kl / self.target - 1, -0.2, 0.2))
        self.value *= 1 + error * n_steps / self.horizon


def get_kl_controller(kl_ctrl):
    """Controller from an `algorithm.kl_ctrl`-like config (mapping or object); missing keys take the defaults of
    docs/algorithms.md §8."""
    kind = config_get(kl_ctrl, "type", "fixed")
    kl_coef = config_get(kl_ctrl, "kl_coef", 0.001)
    if kind == "fixed":
        return FixedKLController(kl_coef=kl_coef)
    if kind == "adaptive":
        horizon = config_get(kl_ctrl, "horizon", 10000)
        if not horizon > 0:
            raise ValueError(f"adaptive KL controller needs horizon > 0, got {horizon}")
        return AdaptiveKLController(
            init_kl_coef=kl_coef, target_kl=config_get(kl_ctrl, "target_kl", 0.1), horizon=horizon
        )
    raise ValueError(f"unknown kl_ctrl type {kind!r}; valid: ['adaptive', 'fixed']")


@torch.no_grad()
def apply_kl_penalty(token_level_scores, old_log_probs, ref_log_prob, response_mask, kl_ctrl, kl_penalty="kl"):
    """rewards = scores − β·KL(old‖ref)·m. β is read before the controller update; `kl_ctrl` is updated
    with the batch's mean per-row KL and n_steps = B (docs/algorithms.md §3.3)."""
    name = kl_penalty[:-1] if kl_penalty.endswith("+") else kl_penalty  # '+' only changes the gradient
    kld = _kl_estimate(old_log_probs - ref_log_prob, name) * response_mask
    beta = kl_ctrl.value
    rewards = token_level_scores - beta * kld
    current_kl = masked_mean(kld, response_mask, axis=-1).mean().item()  # empty rows count as 0
    kl_ctrl.update(current_kl=current_kl, n_steps=token_level_scores.shape[0])
    return rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": float(beta)}
