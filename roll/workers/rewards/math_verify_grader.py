"""Grading with math-verify, with our own time limit.

math-verify's built-in timeout uses signals, which only work on a process's main thread; a Ray
worker's method may not run there, so its timeouts are switched off and parse+verify runs in a
daemon thread that we stop waiting for after `timeout_s` (the answer then scores 0).
"""

import logging
import threading

from math_verify import parse, verify

# math-verify warns on every call that its own timeout is off; we enforce one ourselves.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def _grade(response_text: str, ground_truth: str) -> float:
    gold = parse(str(ground_truth), parsing_timeout=None)
    answer = parse(response_text, parsing_timeout=None)
    if not gold or not answer:
        return 0.0
    return 1.0 if verify(gold, answer, timeout_seconds=None) else 0.0


def grade(response_text: str, ground_truth: str, timeout_s: float = 5.0) -> float:
    """1.0 when the response's final answer equals the ground truth, else 0.0 (also on time-out)."""
    if ground_truth is None:
        raise ValueError("math rule reward: the row has no ground_truth; add a 'ground_truth' column")
    result = [0.0]

    def run():
        result[0] = _grade(response_text, ground_truth)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return result[0] if not thread.is_alive() else 0.0
