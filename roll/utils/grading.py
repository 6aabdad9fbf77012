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
import time

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


def grade_each_with_time_limit(
    grade, rows: list[tuple], timeout_s: float
) -> list[tuple[float, int, BaseException | None]]:
    """`grade_with_time_limit(grade, row, timeout_s)` for every row, in order, with one thread for the rows instead
    of one per row (starting a thread costs ~0.5 ms, ~1 ms on a busy machine: as much as a math-verify call).
    Each row still gets `timeout_s` from the moment its grading starts; a row that runs past it is abandoned
    with its thread, and a new thread goes on with the next row. A RewardDataError is raised to the caller."""
    results: list = [None] * len(rows)
    first = 0
    while first < len(rows):
        first = _grade_until_a_timeout(grade, rows, timeout_s, first, results)
    return results


def _grade_until_a_timeout(grade, rows, timeout_s, first, results) -> int:
    """Grades rows[first:] in one thread until they are done (returns len(rows)) or one times out (its result is
    TIMEOUT; returns the next row's index)."""
    changed = threading.Condition()
    state = {"row": first, "began": time.monotonic(), "abandoned": False, "data_error": None}

    def run():
        for row in range(first, len(rows)):
            with changed:
                if state["abandoned"]:
                    return
                state["row"], state["began"] = row, time.monotonic()
            try:
                outcome = (grade(*rows[row]), GRADED, None)
            except RewardDataError as error:
                outcome = None
                state["data_error"] = error
            except BaseException as error:  # reported to the caller, not printed by the thread
                outcome = (0.0, ERROR, error)
            with changed:
                if state["abandoned"]:
                    return
                if outcome is None:
                    state["row"] = len(rows)
                else:
                    results[row] = outcome
                    state["row"] = row + 1
                    state["began"] = time.monotonic()
                changed.notify()
                if outcome is None:
                    return

    threading.Thread(target=run, daemon=True).start()
    with changed:
        while state["row"] < len(rows):
            row, left = state["row"], state["began"] + timeout_s - time.monotonic()
            if left <= 0:
                state["abandoned"] = True
                results[row] = (0.0, TIMEOUT, None)
                return row + 1
            changed.wait(left)
    if state["data_error"] is not None:
        raise state["data_error"]
    return len(rows)
