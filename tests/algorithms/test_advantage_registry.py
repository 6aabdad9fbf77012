"""Advantage-estimator registry and properties every estimator shares (docs/algorithms.md §2, §10)."""

import inspect

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import roll.algorithms as algorithms
from roll.algorithms import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn, register_adv_est

FUNCTIONS = {
    "gae": "compute_gae_advantage_return",
    "grpo": "compute_grpo_outcome_advantage",
    "grpo_vectorized": "compute_grpo_vectorized_outcome_advantage",
    "grpo_passk": "compute_grpo_passk_outcome_advantage",
    "rloo": "compute_rloo_outcome_advantage",
    "rloo_vectorized": "compute_rloo_vectorized_outcome_advantage",
    "opo": "compute_opo_outcome_advantage",
    "reinforce_plus_plus": "compute_reinforce_plus_plus_outcome_advantage",
    "reinforce_plus_plus_baseline": "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "remax": "compute_remax_outcome_advantage",
    "gpg": "compute_gpg_outcome_advantage",
    "optimal_token_baseline": "compute_optimal_token_baseline_advantage",
}


def inputs():
    """Every argument any estimator needs, for a batch of 2 groups of 2."""
    g = torch.Generator().manual_seed(3)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    return {
        "token_level_rewards": torch.randn(4, 4, generator=g).requires_grad_(True),
        "values": torch.randn(4, 4, generator=g),
        "response_mask": mask,
        "index": np.array(["u", "u", "v", "v"], dtype=object),
        "reward_baselines": torch.randn(4, generator=g),
        "old_log_probs": -torch.rand(4, 4, generator=g),
        "sum_pi_squared": torch.rand(4, 4, generator=g),
        "gamma": 0.9,
        "lam": 0.95,
        "config": OmegaConf.create({"gamma": 0.9, "norm_adv_by_std_in_grpo": True}),
    }


def call(name, **overrides):
    fn = get_adv_estimator_fn(name)
    available = {**inputs(), **overrides}
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in available.items() if k in params}), available


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_registry_round_trip(name):
    assert get_adv_estimator_fn(name) is getattr(algorithms, FUNCTIONS[name])


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(ValueError) as err:
        get_adv_estimator_fn("grpo2")
    for name in FUNCTIONS:
        assert name in str(err.value)


def test_register_new_and_reject_conflicting_duplicate():
    name = "test_only_estimator"
    try:

        @register_adv_est(name)
        def custom(token_level_rewards, response_mask, config=None, **kwargs):
            return token_level_rewards, token_level_rewards

        assert get_adv_estimator_fn(name) is custom
        register_adv_est(name)(custom)  # same function again: fine
        with pytest.raises(ValueError):
            register_adv_est(name)(lambda **kw: None)
    finally:
        ADV_ESTIMATOR_REGISTRY.pop(name, None)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_shapes_no_grad_and_inputs_untouched(name):
    (adv, ret), used = call(name)
    assert adv.shape == ret.shape == (4, 4)
    assert not adv.requires_grad and not ret.requires_grad  # everything runs under no_grad
    fresh = inputs()
    for key, value in used.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value.detach(), fresh[key].detach()), key


@pytest.mark.parametrize(
    "name",
    [
        "grpo",
        "grpo_vectorized",
        "rloo",
        "rloo_vectorized",
        "opo",
        "reinforce_plus_plus_baseline",
        "gpg",
        "grpo_passk",
        "optimal_token_baseline",
    ],
)
def test_index_may_be_list_numpy_ints_or_tensor(name):
    (want, _), _ = call(name)
    for index in (["u", "u", "v", "v"], np.array([7, 7, 9, 9]), torch.tensor([7, 7, 9, 9])):
        (got, _), _ = call(name, index=index)
        assert torch.allclose(got, want, atol=1e-6)
