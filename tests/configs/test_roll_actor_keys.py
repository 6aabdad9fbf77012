"""ROLL's actor-loss keys in ROLL's places (actor_train.pg_variant, topr weights, ActorPGWorker) and
`importance_sampling`: loaded with ROLL's meaning, and combinations that would do nothing are refused."""

import pytest

from roll.configs import ConfigError, effective_policy_loss_mode, policy_loss_config
from roll.pipeline.rlvr.config import load_rlvr_config
from tests.configs.test_roll_compat import rlvr_dict


def test_actor_train_pg_variant_and_topr_weights_as_roll_spells_them():
    data = rlvr_dict(pg_variant="topr")  # ROLL YAMLs also set it at the top, for exp_name
    data["actor_train"].update(
        pg_variant="topr",
        topr_positive_weight=2.0,
        topr_negative_weight=0.5,
        worker_cls="roll.pipeline.rlvr.actor_pg_worker.ActorPGWorker",
    )
    config = load_rlvr_config(data)
    assert effective_policy_loss_mode(config) == "topr"
    loss = policy_loss_config(config)
    assert (loss.topr_positive_weight, loss.topr_negative_weight) == (2.0, 0.5)
    assert config.actor_train.worker_cls == "roll.workers.actor_worker.ActorWorker"


def test_conflicting_places_and_unknown_roll_actor_are_errors():
    data = rlvr_dict(pg_variant="ppo")
    data["actor_train"].update(pg_variant="topr", worker_cls="roll.pipeline.rlvr.actor_worker.CustomWorker")
    with pytest.raises(ConfigError) as error:
        load_rlvr_config(data)
    text = str(error.value)
    assert "'actor_train.pg_variant' = 'topr' conflicts with top-level 'pg_variant' = 'ppo'" in text
    assert "'actor_train.worker_cls' = 'roll.pipeline.rlvr.actor_worker.CustomWorker': no roll counterpart" in text


def test_sequence_ratio_only_with_the_ppo_loss():
    config = load_rlvr_config(rlvr_dict(importance_sampling="seq", pg_variant="ppo"))
    assert policy_loss_config(config).importance_sampling == "seq"
    with pytest.raises(ConfigError, match="'importance_sampling' = seq applies to the PPO loss"):
        load_rlvr_config(rlvr_dict(importance_sampling="seq", pg_variant="topr"))


def test_rl_loss_coef_is_a_key_with_roll_meaning():
    # ROLL: roll/pipeline/rlvr/rlvr_config.py RLVRConfig.rl_loss_coef, default 1.0 (the loss maths:
    # tests/algorithms/test_roll_maths.py); it used to be unknown with the hint "did you mean 'kl_loss_coef'"
    from roll.configs.policy_loss import loss_settings

    config = load_rlvr_config(rlvr_dict(rl_loss_coef=0.25))
    assert loss_settings(config, step=0).rl_loss_coef == 0.25
    assert load_rlvr_config(rlvr_dict()).rl_loss_coef == 1.0


def test_agentic_ratio_type_segment():
    # ROLL: roll/pipeline/agentic/agentic_config.py AgenticConfig.ratio_type (token | segment, default token)
    from roll.configs import compose_config
    from roll.pipeline.agentic.config import load_agentic_config
    from tests.configs.test_roll_compat import CORPUS

    def load(*overrides):
        return load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", list(overrides)))

    assert policy_loss_config(load()).importance_sampling == "token"
    assert policy_loss_config(load("ratio_type=segment")).importance_sampling == "segment"
    with pytest.raises(ConfigError, match="'ratio_type' = segment applies to the PPO loss"):
        load("ratio_type=segment", "pg_variant=topr")
    with pytest.raises(ConfigError, match="'ratio_type' = segment and 'importance_sampling' = seq"):
        load("ratio_type=segment", "importance_sampling=seq")
    with pytest.raises(ConfigError, match="ratio_type"):
        load("ratio_type=turn")
