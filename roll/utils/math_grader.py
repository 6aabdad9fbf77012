"""Grading with math-verify; the time limit is roll's own (roll.utils.grading)."""

import functools
import logging
import re

from math_verify import parse, verify

from roll.utils.grading import RewardDataError, grade_with_time_limit

# math-verify warns on every call that its own timeout is off; we enforce one ourselves.
logging.getLogger("math_verify").setLevel(logging.ERROR)


# A reply that is only a boxed integer, and an integer ground truth: math-verify's verdict is integer
# equality, decided here in microseconds instead of its ~2 ms parse + verify (the demo's replies all look
# like this, and grading was the largest phase of its step).
_BOXED_INTEGER = re.compile(r"\s*\\boxed\{\s*(-?[0-9]+)\s*\}\s*")
_INTEGER = re.compile(r"\s*(-?[0-9]+)\s*")


def exact_integer_match(response_text: str, ground_truth) -> float | None:
    """1.0 / 0.0 when the response is exactly `\\boxed{<integer>}` and the ground truth an integer (text or
    int), else None: math-verify decides."""
    if not isinstance(response_text, str) or type(ground_truth) not in (str, int):
        return None
    reply = _BOXED_INTEGER.fullmatch(response_text)
    truth = _INTEGER.fullmatch(str(ground_truth))
    if reply is None or truth is None:
        return None
    return 1.0 if int(reply.group(1)) == int(truth.group(1)) else 0.0


def grade_math(response_text: str, ground_truth, require_boxed: bool = False) -> float:
    """1.0 when the response's final answer equals the ground truth, else 0.0; no time limit.
    require_boxed: only the last `\\boxed{...}` of the response is graded, and a response without one scores 0
    (math-verify alone also accepts a bare final number or expression)."""
    if ground_truth is None:
        raise RewardDataError("math rule reward: the row has no ground_truth; add a 'ground_truth' column")
    fast = exact_integer_match(response_text, ground_truth)
    if fast is not None:  # exactly \\boxed{int}: passes require_boxed too
        return fast
    if require_boxed:
        boxed = last_boxed(response_text)
        if boxed is None:
            return 0.0
        response_text = f"\\boxed{{{boxed}}}"
    gold = list(_parse_gold(str(ground_truth)))
    answer = parse(response_text, parsing_timeout=None)
    if not gold or not answer:
        return 0.0
    return 1.0 if verify(gold, answer, timeout_seconds=None) else 0.0


@functools.lru_cache(maxsize=65536)
def _parse_gold(ground_truth: str) -> tuple:
    """math-verify's parse of a ground truth, once per distinct text: a group's samples, and every epoch, share
    their prompt's (a fifth of a malformed reply's grading time)."""
    return tuple(parse(ground_truth, parsing_timeout=None))


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
