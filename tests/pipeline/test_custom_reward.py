"""Acceptance: a custom reward worker from a user module works end to end.

examples/custom_reward/my_rewards.py (a RewardWorker subclass named by dotted path in
rlvr_custom_reward.yaml, configured by reward_args) scores every rollout and validation sample: the
scores the pipeline trained on are exactly the user's function of the generated responses, not
math-verify's grades.
"""

import pytest
import torch

from roll.pipeline.core.callbacks import read_samples
from roll.utils.math_grader import grade
from tests.pipeline.helpers import REPO, run_pipeline

pytestmark = pytest.mark.usefixtures("ray_session")
EXAMPLE = REPO / "examples" / "custom_reward"
STEPS = 2


@pytest.fixture(scope="module")
def my_rewards():
    with pytest.MonkeyPatch.context() as patch:  # the driver imports the module as a user's would
        patch.syspath_prepend(str(EXAMPLE))
        import my_rewards

        yield my_rewards


@pytest.fixture(scope="module")
def run(rlvr_config, my_rewards, tmp_path_factory):
    root = tmp_path_factory.mktemp("custom_reward")
    config = rlvr_config(
        root / "out", [f"max_steps={STEPS}", "eval_steps=2"], config_path=EXAMPLE, config_name="rlvr_custom_reward"
    )
    assert config.rewards["format"].worker_cls == "my_rewards.FormatRewardWorker"
    history = run_pipeline(config, sample_dir=root / "samples")
    return config, history, [read_samples(root / "samples", step + 1) for step in range(STEPS)]


def test_step_scores_are_the_user_workers_scores(run, my_rewards):
    config, history, samples = run
    args = {**my_rewards.DEFAULTS, **config.rewards["format"].reward_args}
    assert args["length_penalty"] > 0  # the YAML's reward_args reached the worker (default is 0)
    for step, rows in enumerate(samples):
        expected = [
            my_rewards.format_reward(r["response"], r["response_tokens"], args["pattern"], args["length_penalty"])
            for r in rows
        ]
        scores = [r["score"] for r in rows]
        assert scores == torch.tensor(expected, dtype=torch.float32).tolist(), f"step {step + 1}"
        mean = history["steps"][step]["critic/score/mean"]
        assert mean == pytest.approx(sum(scores) / len(scores), abs=1e-6)
    rows = [r for step_rows in samples for r in step_rows]
    assert len({r["score"] for r in rows}) > 1  # the scores vary with the responses
    # not math-verify's grades: those are 0 or 1, and well-formed wrong answers score high here
    assert not {r["score"] for r in rows} & {0.0, 1.0}
    assert any(r["score"] > 0.5 and grade(r["response"], r["ground_truth"]) == 0.0 for r in rows)


def test_validation_uses_the_custom_reward(run):
    _, history, _ = run
    before, after = history["before"], history["after"]
    failures = {"val/reward/format/errors", "val/reward/format/timeouts"}  # 0: score() does not use grade_rows
    assert set(before) == {"val/score/math", "val/score/all", *failures} and set(after) == set(before)
    assert {before[key] for key in failures} == {0}
    # greedy replies are well-formed `\boxed{n}` of a few tokens: about 1 − 0.01·length each, while
    # math-verify would give the warm-started model's near-chance accuracy
    assert 0.5 < before["val/score/all"] < 1.0
