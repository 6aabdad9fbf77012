"""ROLL's top-level sequence_length in agentic configs: roll's prompt_length / response_length derived from it
(roll/configs/roll_compat/lengths.py), never overwriting a length the config set."""

import re
from pathlib import Path

import pytest

from roll.configs import ConfigError, compose_config
from roll.pipeline.agentic.config import load_agentic_config

CORPUS = Path(__file__).parent / "roll_corpus"


def load(*overrides):
    return load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", list(overrides)))


def test_sequence_length_alone_is_the_trajectory_budget():
    # the corpus file (ROLL's FrozenLake recipe) sets sequence_length: 8192 and neither length
    config = load()
    assert (config.prompt_length, config.response_length) == (256, 8192 - 256)
    assert config.roll_derived_lengths[1] == {"prompt_length": 256, "response_length": 7936}


def test_a_set_prompt_length_is_kept_and_the_rest_goes_to_the_response():
    config = load("+prompt_length=1000")
    assert (config.prompt_length, config.response_length) == (1000, 7192)


def test_a_set_response_length_is_kept_and_the_prompt_gets_the_rest():
    config = load("+response_length=6000")
    assert (config.prompt_length, config.response_length) == (2192, 6000)


def test_both_set_are_kept_and_checked_not_derived():
    config = load("+prompt_length=300", "+response_length=700")
    assert (config.prompt_length, config.response_length) == (300, 700)
    assert getattr(config, "roll_derived_lengths", None) is None


def test_both_set_over_sequence_length_is_a_conflict_naming_the_keys():
    message = "'sequence_length' = 8192 < prompt_length + response_length = 8200 (200 + 8000)"
    with pytest.raises(ConfigError, match=re.escape(message)):
        load("+prompt_length=200", "+response_length=8000")


def test_a_step_only_config_gives_the_reply_its_turn_budget():
    # a step row is one turn: ROLL pads its prompt (with the history window) and one reply to sequence_length
    step = ["env_manager_cls=" + STEP, "agent_template='{current_observation}'"]  # both envs of the file
    config = load("sequence_length=1024", *step)
    assert (config.prompt_length, config.response_length) == (1024 - 65, 65)  # max_tokens_per_step 64 + end token


def test_too_short_a_sequence_length_names_the_keys_and_the_fix():
    with pytest.raises(ConfigError) as error:
        load("sequence_length=300")  # 256 for the first turn leaves 44 < max_tokens_per_step 64 + 1
    text = str(error.value)
    assert "'sequence_length' = 300 leaves prompt_length = 256, response_length = 44" in text
    assert "max_tokens_per_step = 64" in text and "set prompt_length and response_length" in text
    assert "< prompt_length + response_length" not in text  # reported once, not again by the width check


def test_a_set_length_that_leaves_no_room_is_refused():
    with pytest.raises(ConfigError, match=re.escape("leaves prompt_length = 0, response_length = 8192")):
        load("+response_length=8192")


def test_dry_run_prints_the_derivation(capsys):
    from roll.configs import describe_config

    text = describe_config(load())
    assert "from ROLL's sequence_length = 8192: prompt_length = 256, response_length = 7936" in text
    assert "from ROLL's sequence_length" not in describe_config(load("+prompt_length=256", "+response_length=512"))


STEP = "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager"
