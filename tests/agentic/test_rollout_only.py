"""A rollout-only agentic config (no actor_train: ROLL's agentic rollout pipeline): what loads, what is refused,
and the scores it reports. The run itself: tests/pipeline/test_agentic.py::test_rollout_only_config_trains_nothing."""

import pytest

from roll.configs import ConfigError, compose_config
from roll.pipeline.agentic.config import load_agentic_config
from tests.configs.test_roll_compat import CORPUS


def rollout_only(*overrides):
    return load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", ["~actor_train", *overrides]))


def test_a_config_without_actor_train_is_rollout_only():
    from roll.configs import describe_config

    config = rollout_only()
    assert config.rollout_only and config.actor_train is None
    assert config.tokenizer_role() == "actor_infer"
    text = describe_config(config)
    assert "rollout-only (no actor_train)" in text and "note: reference configured but not started" in text
    assert not load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake")).rollout_only


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["async_generation_ratio=1"], "'async_generation_ratio' needs 'actor_train'"),
        (["resume_from_checkpoint=true"], "a rollout-only run (no actor_train) saves no checkpoints"),
        (["~actor_infer"], "a pipeline config needs both 'actor_train'"),
    ],
)
def test_rollout_only_refuses_what_it_would_not_use(overrides, message):
    with pytest.raises(ConfigError, match=__import__("re").escape(message)):
        rollout_only(*overrides)


def test_score_metrics_are_rolls_mean_max_min_per_tag():
    from roll.pipeline.agentic.rollout_pipeline import score_metrics

    metrics = score_metrics([1.0, -0.5, 0.25, 2.0], ["A", "B", "A", "B"])
    assert metrics["rollout/all/score/mean"] == pytest.approx(2.75 / 4)
    assert (metrics["rollout/all/score/max"], metrics["rollout/all/score/min"]) == (2.0, -0.5)
    assert (metrics["rollout/A/score/mean"], metrics["rollout/A/score/min"]) == (0.625, 0.25)
    assert (metrics["rollout/B/score/max"], metrics["rollout/B/score/min"]) == (2.0, -0.5)
    assert metrics["critic/score/mean"] == metrics["rollout/all/score/mean"]  # the progress line's reward
