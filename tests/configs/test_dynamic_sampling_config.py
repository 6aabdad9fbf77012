"""rewards.<domain>.query_filter_config and the refill keys load strictly."""

import pytest

from roll.configs import ConfigError
from tests.configs.test_config import error_of, tiny

FILTER = "+rewards.math.query_filter_config"


def test_filter_keys_load_with_roll_names():
    config = tiny(
        f"{FILTER}.type=mean_filter",
        f"+{FILTER[1:]}.filter_args.threshold_down=0.0",
        f"+{FILTER[1:]}.filter_args.threshold_up=1.0",
        "+is_use_additional_prompts=true",
        "+max_additional_running_prompts=24",
    )
    spec = config.rewards["math"].query_filter_config
    assert (spec.type, spec.filter_args) == ("mean_filter", {"threshold_down": 0.0, "threshold_up": 1.0})
    assert (config.is_use_additional_prompts, config.max_additional_running_prompts) == (True, 24)
    assert tiny().rewards["math"].query_filter_config.type == "no_filter"  # off by default


@pytest.mark.parametrize(
    "overrides, message",
    [
        ([f"{FILTER}.type=std_filter", f"+{FILTER[1:]}.filter_args.threshold_up=1"], "not read by type 'std_filter'"),
        ([f"{FILTER}.type=median"], "median"),
        ([f"{FILTER}.type=std_filter", f"+{FILTER[1:]}.filter_args.std_threshold=low"], "std_threshold"),
        (["+rewards.math.response_filter_config.type=std_filter"], "response_filter_config"),
        (["+max_additional_running_prompts=-1"], "max_additional_running_prompts"),
    ],
)
def test_bad_filter_settings_name_the_key(overrides, message):
    assert message in error_of(*overrides)


def test_error_type_is_config_error():
    with pytest.raises(ConfigError):
        tiny(f"{FILTER}.type=std_filter", f"+{FILTER[1:]}.filter_args.bogus=1")


SCORERS = "+rewards.math.scorers"
FORMAT = "{name: format, worker_cls: roll.workers.rewards.format_rule.BoxedFormatRewardWorker, weight: 0.2}"
ANSWER = "{name: answer, worker_cls: roll.workers.rewards.math_rule.MathRuleRewardWorker}"


def test_scorers_become_one_role_each():
    from roll.configs.checks import roles

    config = tiny("rewards.math.worker_cls=null", f"{SCORERS}=[{FORMAT},{ANSWER}]")
    reward = config.rewards["math"]
    assert [(s.name, s.weight) for s in reward.scorers] == [("format", 0.2), ("answer", 1.0)]
    scorer_roles = {name: worker for name, worker in roles(config).items() if name.startswith("rewards.")}
    assert sorted(scorer_roles) == ["rewards.math.answer", "rewards.math.format"]
    assert scorer_roles["rewards.math.format"].world_size == 1  # the role checks filled the scorer's role


@pytest.mark.parametrize(
    "overrides, message",
    [
        ([f"{SCORERS}=[{FORMAT}]"], "either worker_cls"),  # the YAML's worker_cls left in place
        (["rewards.math.worker_cls=null", f"{SCORERS}=[{FORMAT},{FORMAT}]"], "used twice"),
        (["rewards.math.worker_cls=null", f"{SCORERS}=[{{worker_cls: a.B}}]"], "scorers[0].name"),
        (
            ["rewards.math.worker_cls=null", f"{SCORERS}=[{{name: x, worker_cls: a.B, tag_included: [m]}}]"],
            "tag_included",
        ),
    ],
)
def test_bad_scorers_name_the_key(overrides, message):
    assert message in error_of(*overrides)
