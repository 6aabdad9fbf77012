"""Grading with math-verify; the time limit is roll's own (roll.workers.rewards.grading)."""

import logging

from math_verify import parse, verify

from roll.workers.rewards.grading import RewardDataError, grade_with_time_limit

# math-verify warns on every call that its own timeout is off; we enforce one ourselves.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def grade_math(response_text: str, ground_truth, require_boxed: bool = False) -> float:
    """1.0 when the response's final answer equals the ground truth, else 0.0; no time limit.
    require_boxed: only the last `\\boxed{...}` of the response is graded, and a response without one scores 0
    (math-verify alone also accepts a bare final number or expression)."""
    if ground_truth is None:
        raise RewardDataError("math rule reward: the row has no ground_truth; add a 'ground_truth' column")
    if require_boxed:
        boxed = last_boxed(response_text)
        if boxed is None:
            return 0.0
        response_text = f"\\boxed{{{boxed}}}"
    gold = parse(str(ground_truth), parsing_timeout=None)
    answer = parse(response_text, parsing_timeout=None)
    if not gold or not answer:
        return 0.0
    return 1.0 if verify(gold, answer, timeout_seconds=None) else 0.0


def grade(response_text: str, ground_truth, timeout_s: float = 5.0) -> float:
    """grade_math within `timeout_s` seconds; 0.0 when it raises or times out (not counted: the reward worker
    counts and logs those, see RewardWorker.grade_rows)."""
    return grade_with_time_limit(grade_math, (response_text, ground_truth), timeout_s)[0]


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` in `text` (nested braces balanced), or None."""
    start = text.rfind("\\boxed{")
    while start != -1:
        depth, begin = 0, start + len("\\boxed{")
        for index in range(begin, len(text)):
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            if depth < 0:
                return text[begin:index]
        start = text.rfind("\\boxed{", 0, start)  # unclosed: try an earlier one
    return None
