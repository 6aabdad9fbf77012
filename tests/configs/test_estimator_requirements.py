"""Config checks read an estimator's declared requirements (register_adv_est), never its name."""

import ast
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from roll.algorithms import ADV_ESTIMATOR_REGISTRY, register_adv_est
from roll.configs import ConfigError, compose_config
from roll.pipeline.agentic.config import load_agentic_config
from roll.pipeline.rlvr.config import load_rlvr_config

REPO = Path(__file__).resolve().parents[2]
CRITIC = {
    "critic": {
        "model_args": {"model_name_or_path": "${model_path}", "dtype": "float32"},
        "training_args": {"per_device_train_batch_size": 64},
        "strategy_args": {"strategy_name": "deepspeed_train", "strategy_config": "${deepspeed_zero}"},
        "device_mapping": [1],
    }
}


def tiny(*overrides, critic=False):
    composed = compose_config(str(REPO / "examples" / "tiny_rlvr"), "rlvr_tiny", list(overrides))
    if critic:
        OmegaConf.set_struct(composed, False)  # a whole new role
        composed = OmegaConf.merge(composed, OmegaConf.create(CRITIC))
    return load_rlvr_config(composed)


def error_of(*overrides, critic=False) -> str:
    with pytest.raises(ConfigError) as info:
        tiny(*overrides, critic=critic)
    return str(info.value)


def _outcome(token_level_rewards, response_mask, config=None, **kwargs):
    return token_level_rewards, token_level_rewards


@pytest.fixture
def user_estimators():
    """Estimators registered the way a user would, removed again afterwards."""
    names = {
        "test_user_pairs": dict(min_group_size=2),
        "test_user_fours": dict(min_group_size=4),
        "test_user_values": dict(needs_critic=True),
        "test_user_greedy": dict(greedy_baseline=True),
    }
    for name, requirements in names.items():
        register_adv_est(name, **requirements)(_outcome)
    yield
    for name in names:
        ADV_ESTIMATOR_REGISTRY.pop(name)


ONE_SAMPLE = ["num_return_sequences_in_group=1", "actor_train.training_args.per_device_train_batch_size=32"]


def test_user_estimator_with_a_group_size_is_refused_with_one_sample(user_estimators):
    message = error_of("adv_estimator=test_user_pairs", *ONE_SAMPLE)
    assert "adv_estimator 'test_user_pairs' compares samples of the same prompt" in message
    assert "set num_return_sequences_in_group ≥ 2 (it is 1)" in message
    assert "≥ 4 (it is 2)" in error_of("adv_estimator=test_user_fours", "num_return_sequences_in_group=2")
    assert tiny("adv_estimator=test_user_fours").num_return_sequences_in_group == 8
    # an estimator that declares nothing runs with one sample per prompt
    assert tiny("adv_estimator=reinforce_plus_plus", *ONE_SAMPLE).adv_estimator == "reinforce_plus_plus"


def test_user_estimator_that_reads_values_needs_a_critic(user_estimators):
    message = error_of("adv_estimator=test_user_values")
    assert "adv_estimator: test_user_values needs a 'critic' role (a value model)" in message
    assert tiny("adv_estimator=test_user_values", critic=True).critic.name == "critic"
    assert tiny("adv_estimator=gae", critic=True).critic is not None


def test_a_critic_without_an_estimator_that_reads_values_is_refused(user_estimators):
    message = error_of("adv_estimator=test_user_pairs", critic=True)
    assert "a 'critic' role is configured but adv_estimator 'test_user_pairs' does not use values" in message
    # the fix names every registered estimator that reads values, the user's too
    assert "remove 'critic' or set adv_estimator: gae / test_user_values" in message


def test_agentic_pipeline_refuses_an_estimator_that_needs_a_greedy_baseline(user_estimators):
    def agentic(estimator):
        overrides = ["model_path=/nonexistent", f"adv_estimator={estimator}"]
        return load_agentic_config(
            compose_config(str(REPO / "examples" / "agentic_demo"), "frozen_lake_traj", overrides)
        )

    assert agentic("grpo").adv_estimator == "grpo"
    for estimator in ("remax", "test_user_greedy"):
        with pytest.raises(ConfigError, match=f"adv_estimator '{estimator}' needs the reward of a greedy answer"):
            agentic(estimator)
    assert tiny("adv_estimator=test_user_greedy").adv_estimator == "test_user_greedy"  # RLVR generates one


# --- no module outside roll/algorithms decides by an estimator's name ------------------------------------
def _names_an_estimator(node) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in ADV_ESTIMATOR_REGISTRY
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_an_estimator(element) for element in node.elts)
    return False


def _reads_adv_estimator(node) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr == "adv_estimator")
        or (isinstance(n, ast.Constant) and n.value == "adv_estimator")
        for n in ast.walk(node)
    )


def estimator_name_comparisons(source: str) -> list[int]:
    """Line numbers of comparisons that involve `adv_estimator` or a registered estimator's name
    (`x.adv_estimator == "gae"`, `name in ("grpo", "rloo")`, `if name != "remax"`), and of collections
    of estimator names (a tuple such as GROUP_ESTIMATORS that a comparison would read)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_reads_adv_estimator(o) or _names_an_estimator(o) for o in operands):
                lines.append(node.lineno)
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and _names_an_estimator(node):
            lines.append(node.lineno)
        elif isinstance(node, ast.Match) and _reads_adv_estimator(node.subject):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_the_checker_finds_name_comparisons():
    found = estimator_name_comparisons(
        "if config.adv_estimator == 'remax':\n    pass\n"  # 1
        "GROUPS = ('grpo', 'rloo')\n"  # 3
        "name = config.adv_estimator\n"
        "if name != 'gae':\n    pass\n"  # 5
        "x = config.adv_estimator in GROUPS\n"  # 7
        "match cfg.adv_estimator:\n    case _:\n        pass\n"  # 8
        "ok = spec.needs_critic and config.critic is None\n"
        "message = f'adv_estimator {config.adv_estimator} needs a critic; choose grpo'\n"
    )
    assert found == [1, 3, 5, 7, 8]


def test_no_module_outside_roll_algorithms_compares_estimator_names():
    offenders = {}
    for path in sorted((REPO / "roll").rglob("*.py")):
        if (REPO / "roll" / "algorithms") in path.parents:
            continue
        lines = estimator_name_comparisons(path.read_text())
        if lines:
            offenders[str(path.relative_to(REPO))] = lines
    assert offenders == {}, "decide by get_adv_estimator_spec(name) instead of the estimator's name"


def test_every_declarable_forward_pass_has_a_worker_method():
    from roll.algorithms import FORWARD_PASSES
    from roll.distributed.decorator import DISPATCH_ATTR, Dispatch
    from roll.pipeline.core.ppo_update import FORWARD_PASS_METHODS
    from roll.workers.actor_worker import ActorWorker

    assert set(FORWARD_PASS_METHODS) == set(FORWARD_PASSES)
    for method in FORWARD_PASS_METHODS.values():
        assert getattr(getattr(ActorWorker, method), DISPATCH_ATTR) is Dispatch.DP_MP_COMPUTE
