"""The exact-match path of the math grader gives math-verify's verdict wherever it decides, and leaves every
other reply to math-verify."""

import itertools

import pytest
from math_verify import parse, verify

from roll.utils.math_grader import exact_integer_match, grade_math

REPLIES = ["\\boxed{7}", " \\boxed{ 7 } ", "\\boxed{07}", "\\boxed{-7}", "\\boxed{8}", "\\boxed{0}", "\\boxed{-0}",
           "\\boxed{123456789}", "\\boxed{12}\n"]  # fmt: skip
TRUTHS = ["7", " 7", "-7", "8", "0", "07", "123456789", 7, -7, 12]


def math_verify_only(reply, truth) -> float:
    gold, answer = parse(str(truth), parsing_timeout=None), parse(reply, parsing_timeout=None)
    return 1.0 if gold and answer and verify(gold, answer, timeout_seconds=None) else 0.0


@pytest.mark.parametrize("reply,truth", list(itertools.product(REPLIES, TRUTHS)))
def test_fast_path_agrees_with_math_verify(reply, truth):
    fast = exact_integer_match(reply, truth)
    assert fast is not None, f"{reply!r} vs {truth!r} should take the exact-match path"
    assert fast == math_verify_only(reply, truth) == grade_math(reply, truth)


@pytest.mark.parametrize(
    "reply,truth",
    [
        ("The answer is \\boxed{7}.", "7"),  # text around the box
        ("\\boxed{7.0}", "7"),  # not an integer
        ("\\boxed{3+4}", "7"),
        ("7", "7"),  # no box
        ("\\boxed{7}", "7.0"),
        ("\\boxed{1/2}", "0.5"),
        ("\\boxed{٧}", "7"),  # non-ASCII digits
        ("\\boxed{7}", True),  # not a str/int ground truth
        ("\\boxed{7}", 7.0),
    ],
)
def test_everything_else_goes_to_math_verify(reply, truth):
    assert exact_integer_match(reply, truth) is None
    if not isinstance(truth, bool):
        assert grade_math(reply, truth) == math_verify_only(reply, truth)


def test_math_worker_grades_boxed_integers_inline(monkeypatch):
    """Only the rows the exact-match path cannot decide pay for a time-limited grading thread; scores and
    statuses are those of grading every row with math-verify."""
    from roll.utils.grading import GRADED
    from roll.workers.rewards import base, math_rule
    from tests.workers.test_reward_grading import batch_of, make_worker

    threaded = []
    real = base.grade_each_with_time_limit
    monkeypatch.setattr(
        base, "grade_each_with_time_limit", lambda g, rows, t: threaded.extend(rows) or real(g, rows, t)
    )
    worker, _ = make_worker(math_rule.MathRuleRewardWorker, monkeypatch)
    replies = ["\\boxed{5}", "\\boxed{4}", "so \\boxed{5}", "\\boxed{5.0}", " \\boxed{ 5 }"]
    out = worker.compute_rewards(batch_of(replies, ["5"] * len(replies)))
    assert out.batch["scores"].tolist() == [math_verify_only(r, "5") for r in replies] == [1, 0, 1, 1, 1]
    assert out.batch["grading_status"].tolist() == [GRADED] * len(replies)
    assert threaded == [("so \\boxed{5}", "5"), ("\\boxed{5.0}", "5")]
