"""Grading with math-verify; the time limit is roll's own (roll.workers.rewards.grading)."""

import logging

from math_verify import parse, verify

from roll.workers.rewards.grading import RewardDataError, grade_with_time_limit

# math-verify warns on every call that its own timeout is off; we enforce one ourselves.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def grade_math(response_text: str, ground_truth) -> float:
    """1.0 when the response's final answer equals the ground truth, else 0.0; no time limit."""
    if ground_truth is None:
        raise RewardDataError("math rule reward: the row has no ground_truth; add a 'ground_truth' column")
    gold = parse(str(ground_truth), parsing_timeout=None)
    answer = parse(response_text, parsing_timeout=None)
    if not gold or not answer:
        return 0.0
    return 1.0 if verify(gold, answer, timeout_seconds=None) else 0.0


def grade(response_text: str, ground_truth, timeout_s: float = 5.0) -> float:
    """grade_math within `timeout_s` seconds; 0.0 when it raises or times out (not counted: the reward worker
    counts and logs those, see RewardWorker.grade_rows)."""
    return grade_with_time_limit(grade_math, (response_text, ground_truth), timeout_s)[0]
