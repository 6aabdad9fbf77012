"""grade_each_with_time_limit: the rows of a batch share one grading thread, yet each row keeps its own time
limit, a failure stays that row's, and a row that cannot be graded at all stops the batch."""

import threading
import time

import pytest

from roll.utils.grading import ERROR, GRADED, TIMEOUT, RewardDataError, grade_each_with_time_limit


def grader(reply, _truth):
    if reply == "hang":
        time.sleep(5)
    if reply == "slow":
        time.sleep(0.15)  # under the limit: a row's limit is its own, not a share of the batch's
    if reply == "raise":
        raise ArithmeticError("grader bug")
    if reply == "no truth":
        raise RewardDataError("the row has no ground_truth")
    return float(reply == "right")


def test_each_row_gets_its_own_limit_and_outcome():
    rows = [(reply, None) for reply in ("right", "slow", "hang", "wrong", "raise", "slow", "right")]
    started = time.monotonic()
    out = grade_each_with_time_limit(grader, rows, timeout_s=0.5)
    assert time.monotonic() - started < 3.0  # the hung row was abandoned after 0.5 s, not awaited
    assert [score for score, _, _ in out] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert [status for _, status, _ in out] == [GRADED, GRADED, TIMEOUT, GRADED, ERROR, GRADED, GRADED]
    assert isinstance(out[4][2], ArithmeticError)


def test_one_thread_grades_the_rows_until_a_row_times_out(monkeypatch):
    started = []
    real = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self) or real(self))
    grade_each_with_time_limit(grader, [("right", None)] * 50, timeout_s=5.0)
    assert len(started) == 1
    grade_each_with_time_limit(grader, [("right", None), ("hang", None), ("right", None)], timeout_s=0.2)
    assert len(started) == 3  # a second thread for the rows after the abandoned one


def test_a_row_that_cannot_be_graded_stops_the_batch():
    with pytest.raises(RewardDataError, match="no ground_truth"):
        grade_each_with_time_limit(grader, [("right", None), ("no truth", None), ("right", None)], timeout_s=5.0)
    assert grade_each_with_time_limit(grader, [], timeout_s=1.0) == []
