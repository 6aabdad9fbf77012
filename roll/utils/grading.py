"""Per-sample grading under a time limit, with the outcome of each sample (graded, failed, timed out).

A grader that raises or runs past its time limit scores 0; the reward worker counts these per domain
(`reward/<domain>/errors`, `reward/<domain>/timeouts` in the step metrics) and logs the first few with
their row. A `RewardDataError` is different: the row cannot be graded at all (no ground truth, a malformed
one), and the step fails with its message.

The limit is enforced by waiting for a daemon thread (math-verify's own timeout uses signals, which only
work on a process's main thread; a Ray worker's method may not run there). A grader that never returns is
abandoned, not stopped: its thread keeps running in the background until it finishes.
"""

import threading

GRADED, ERROR, TIMEOUT = 0, 1, 2  # the per-row `grading_status` a reward worker returns


class RewardDataError(ValueError):
    """The row cannot be graded at all; raised to the step instead of scoring the row 0."""


def grade_with_time_limit(grade, args: tuple, timeout_s: float) -> tuple[float, int, BaseException | None]:
    """(score, status, exception) of `grade(*args)` run for at most `timeout_s` seconds: (score, GRADED, None),
    (0.0, ERROR, the exception) or (0.0, TIMEOUT, None). A RewardDataError is raised to the caller."""
    outcome: dict = {}

    def run():
        try:
            outcome["score"] = grade(*args)
        except BaseException as error:  # reported to the caller, not printed by the thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return 0.0, TIMEOUT, None
    if "error" in outcome:
        if isinstance(outcome["error"], RewardDataError):
            raise outcome["error"]
        return 0.0, ERROR, outcome["error"]
    return outcome["score"], GRADED, None
