"""The exact-match path of the math grader gives math-verify's verdict wherever it decides, and leaves every
other reply to math-verify."""

import itertools

import pytest
from math_verify import parse, verify

from roll.workers.rewards.math_verify_grader import exact_integer_match, grade_math

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
