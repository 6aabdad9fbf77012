"""Estimator requirements declared at registration (`register_adv_est(name, min_group_size=…, …)`)."""

import inspect

import pytest
import torch

from roll.algorithms import (
    ADV_ESTIMATOR_REGISTRY,
    FORWARD_PASSES,
    EstimatorSpec,
    get_adv_estimator_fn,
    get_adv_estimator_spec,
    register_adv_est,
)
from tests.algorithms.test_advantage_registry import FUNCTIONS, call

BUILT_IN = {
    "gae": EstimatorSpec("gae", needs_critic=True),
    "grpo": EstimatorSpec("grpo", min_group_size=2, agentic_group_of_one="reinforce"),
    "grpo_vectorized": EstimatorSpec("grpo_vectorized", min_group_size=2),
    "grpo_passk": EstimatorSpec("grpo_passk", min_group_size=2),
    "rloo": EstimatorSpec("rloo", min_group_size=2),
    "rloo_vectorized": EstimatorSpec("rloo_vectorized", min_group_size=2),
    "opo": EstimatorSpec("opo", min_group_size=2),
    "reinforce_plus_plus": EstimatorSpec("reinforce_plus_plus"),
    "reinforce_plus_plus_baseline": EstimatorSpec("reinforce_plus_plus_baseline", min_group_size=2),
    "remax": EstimatorSpec("remax", greedy_baseline=True),
    "gpg": EstimatorSpec("gpg", min_group_size=2),
    "optimal_token_baseline": EstimatorSpec(
        "optimal_token_baseline", min_group_size=2, forward_passes=("sum_pi_squared",)
    ),
}


@pytest.fixture
def scratch_names():
    """Names a test registers; removed afterwards so the registry stays as shipped."""
    names = []
    yield names
    for name in names:
        ADV_ESTIMATOR_REGISTRY.pop(name, None)


def test_every_built_in_has_its_spec():
    assert set(BUILT_IN) == set(FUNCTIONS)
    for name, spec in BUILT_IN.items():
        assert get_adv_estimator_spec(name) == spec, name


def _required(fn) -> set:
    return {
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_spec_matches_the_inputs_the_function_requires(name):
    """A declared input is one the maths cannot run without, and every such input is declared."""
    spec, required = get_adv_estimator_spec(name), _required(get_adv_estimator_fn(name))
    assert spec.needs_critic == ("values" in required)
    assert spec.greedy_baseline == ("reward_baselines" in required)
    assert set(spec.forward_passes) == required & set(FORWARD_PASSES)


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_estimators_that_compare_within_a_group_declare_a_group_size_of_two(name):
    """An estimator whose result depends on how rows are grouped (a baseline from the other members of a
    prompt's group) needs ≥ 2 samples per prompt: with singleton groups it fails (grpo_passk) or silently
    loses its baseline. One that ignores the grouping needs none."""
    (paired, _), _ = call(name)  # 2 groups of 2
    try:
        (alone, _), _ = call(name, index=["a", "b", "c", "d"])
    except ValueError:
        alone = None
    uses_groups = alone is None or not torch.allclose(paired, alone)
    assert get_adv_estimator_spec(name).min_group_size == (2 if uses_groups else 1)


def test_registration_carries_the_requirements(scratch_names):
    scratch_names.append("test_spec_needs_all")

    @register_adv_est("test_spec_needs_all", min_group_size=3, forward_passes="sum_pi_squared", needs_critic=True)
    def needs_all(token_level_rewards, response_mask, config=None, **kwargs):
        return token_level_rewards, token_level_rewards

    spec = get_adv_estimator_spec("test_spec_needs_all")
    assert spec == EstimatorSpec("test_spec_needs_all", 3, ("sum_pi_squared",), False, True)
    with pytest.raises(AttributeError):
        spec.min_group_size = 1  # frozen
    # the same function with the same requirements again is fine; other requirements conflict
    register_adv_est("test_spec_needs_all", min_group_size=3, forward_passes=("sum_pi_squared",), needs_critic=True)(
        needs_all
    )
    with pytest.raises(ValueError, match="already registered"):
        register_adv_est("test_spec_needs_all", min_group_size=2)(needs_all)


def test_verl_style_registration_has_no_requirements(scratch_names):
    scratch_names += ["test_spec_plain", "test_spec_by_hand"]

    @register_adv_est("test_spec_plain")
    def plain(token_level_rewards, response_mask, config=None, **kwargs):
        return token_level_rewards, token_level_rewards

    assert get_adv_estimator_spec("test_spec_plain") == EstimatorSpec("test_spec_plain")
    ADV_ESTIMATOR_REGISTRY["test_spec_by_hand"] = plain  # verl users may write the dict directly
    assert get_adv_estimator_spec("test_spec_by_hand") == EstimatorSpec("test_spec_by_hand")


def test_a_function_replaced_by_hand_does_not_inherit_the_old_requirements(scratch_names):
    scratch_names.append("test_spec_replaced")
    register_adv_est("test_spec_replaced", needs_critic=True)(lambda **kw: None)
    ADV_ESTIMATOR_REGISTRY["test_spec_replaced"] = lambda **kw: None
    assert not get_adv_estimator_spec("test_spec_replaced").needs_critic


def test_bad_requirements_are_refused_at_registration():
    with pytest.raises(ValueError, match=r"unknown forward_passes \['entropy'\]"):
        register_adv_est("test_spec_bad", forward_passes=("entropy",))
    with pytest.raises(ValueError, match="min_group_size must be an int ≥ 1"):
        register_adv_est("test_spec_bad", min_group_size=0)
    assert "test_spec_bad" not in ADV_ESTIMATOR_REGISTRY


def test_unknown_name_lists_the_registered_ones():
    with pytest.raises(ValueError, match="unknown adv_estimator 'grpo2'.*'gae'"):
        get_adv_estimator_spec("grpo2")
