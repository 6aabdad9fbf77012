"""Broken inputs that only show at run time fail the step with a message naming the class and the row, and
leave the last checkpoint intact (a custom reward that returns NaN, or the wrong number of scores); a role
method that hangs fails after the role's rpc_timeout with a message naming the role and method.

Each case is a 2-step run of the tiny demo (checkpoint every step) whose reward misbehaves at step 2.
"""

import time

import pytest

from roll.utils import checkpoint
from tests.pipeline.helpers import NO_REFERENCE, make_config, run_pipeline

pytestmark = pytest.mark.usefixtures("ray_for_module")
FAULTY = "tests.reliability.faulty.FaultyRewardWorker"


def _faulty_run(small_demo, out, fault: str, *overrides):
    config = make_config(
        small_demo,
        out,
        ["max_steps=2", "save_steps=1", NO_REFERENCE, *overrides],
        blocks={"rewards": {"math": {"worker_cls": FAULTY, "reward_args": {"fault": fault, "at_call": 2}}}},
    )
    started = time.perf_counter()
    with pytest.raises(Exception) as caught:
        run_pipeline(config)
    return str(caught.value), time.perf_counter() - started


def _only_step_1_is_saved(out):
    root = checkpoint.checkpoint_root(str(out))
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-1"]
    found = checkpoint.find_checkpoint(str(out), True)
    assert found.name == "step-1"
    checkpoint.verify(found)


@pytest.mark.parametrize(
    "fault, expected",
    [
        (
            "nan",
            [
                "rewards.math.compute_rewards failed on rank 0",
                "FaultyRewardWorker.score: row 3 has score nan",
                "scores must be finite numbers",
            ],
        ),
        (
            "count",
            [
                "rewards.math.compute_rewards failed on rank 0",
                "FaultyRewardWorker.score returned 31 scores for 32 rows",
            ],
        ),
    ],
)
def test_a_reward_that_returns_bad_scores_fails_the_step_and_keeps_the_checkpoint(
    small_demo, tmp_path, fault, expected
):
    message, _ = _faulty_run(small_demo, tmp_path / "out", fault)
    for text in expected:
        assert text in message, message
    _only_step_1_is_saved(tmp_path / "out")


def test_a_hanging_reward_fails_after_its_rpc_timeout(small_demo, tmp_path):
    message, seconds = _faulty_run(small_demo, tmp_path / "out", "hang", "rewards.math.rpc_timeout=3")
    assert "rewards.math.compute_rewards did not answer within 3.0 s (rank 0 of 1; gave up after 3." in message, message
    assert "raise rewards.math.rpc_timeout if the work is legitimately slow" in message
    print(f"hanging reward: the run failed after {seconds:.1f} s in all (2 steps, rpc_timeout 3 s): {message}")
    _only_step_1_is_saved(tmp_path / "out")
