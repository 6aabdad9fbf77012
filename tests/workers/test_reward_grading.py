"""Grading failures of the built-in reward workers are counted and logged, not silent zeros; every built-in
worker honours rewards.<domain>.timeout. The workers run in this process (their Ray dispatch is the
Cluster's, tested in tests/distributed)."""

import logging
import time

import pytest

from roll.configs import RewardConfig
from roll.distributed.data_proto import DataProto
from roll.utils.grading import ERROR, GRADED, TIMEOUT, RewardDataError
from roll.workers.rewards import choice_rule, math_rule
from roll.workers.rewards.base import LOGGED_FAILURES

TIMEOUT_S = 0.5


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def make_worker(cls, monkeypatch, domain="math"):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0")  # Worker sets the torch.distributed env: restored after the test
    worker = cls(RewardConfig(name=f"rewards.{domain}", worker_cls="x.Y", timeout=TIMEOUT_S), rank=0, world_size=1)
    worker.initialize()
    records = Records()
    worker.logger.addHandler(records)
    return worker, records


def batch_of(responses, truths):
    return DataProto.from_dict(
        non_tensors={
            "prompt_text": [f"question {i}: " + "x" * 300 for i in range(len(responses))],
            "response_text": responses,
            "ground_truth": truths,
        }
    )


def flaky(grade):
    """The real grader, except on responses that say "raise" (a grader bug) or "hang" (runs for 30 s)."""

    def run(response, truth):
        if response == "raise":
            raise ArithmeticError("grader bug")
        if response == "hang":
            time.sleep(30)
        return grade(response, truth)

    return run


def test_math_grader_that_raises_or_hangs_scores_zero_and_is_counted_and_logged(monkeypatch):
    monkeypatch.setattr(math_rule, "grade_math", flaky(math_rule.grade_math))
    worker, records = make_worker(math_rule.MathRuleRewardWorker, monkeypatch)
    started = time.monotonic()
    out = worker.compute_rewards(batch_of(["\\boxed{5}", "raise", "hang", "\\boxed{4}"], ["5", "5", "5", "5"]))
    assert time.monotonic() - started < 10.0  # the hung grader was abandoned after TIMEOUT_S, not awaited
    assert out.batch["scores"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert out.batch["grading_status"].tolist() == [GRADED, ERROR, TIMEOUT, GRADED]
    raised, hung = records.messages
    assert "raised ArithmeticError('grader bug')" in raised and "reward/math/errors" in raised
    assert "response:     raise" in raised and "ground truth: 5" in raised and "question 1: xxx" in raised
    assert "(312 chars)" in raised  # the prompt is an excerpt
    assert f"timed out after {TIMEOUT_S} s" in hung and "response:     hang" in hung


def test_only_the_first_failures_are_logged_but_all_are_counted(monkeypatch):
    monkeypatch.setattr(math_rule, "grade_math", flaky(math_rule.grade_math))
    worker, records = make_worker(math_rule.MathRuleRewardWorker, monkeypatch)
    for _ in range(2):
        out = worker.compute_rewards(batch_of(["raise"] * 4, ["1"] * 4))
        assert out.batch["grading_status"].tolist() == [ERROR] * 4
    assert len(records.messages) == LOGGED_FAILURES


def test_the_multiple_choice_worker_honours_the_timeout(monkeypatch):
    monkeypatch.setattr(choice_rule, "grade_choice", flaky(choice_rule.grade_choice))
    worker, records = make_worker(choice_rule.MultipleChoiceRewardWorker, monkeypatch, domain="mcq")
    out = worker.compute_rewards(batch_of(["Answer: B", "hang", "raise"], ["B", "B", "B"]))
    assert out.batch["scores"].tolist() == [1.0, 0.0, 0.0]
    assert out.batch["grading_status"].tolist() == [GRADED, TIMEOUT, ERROR]
    assert "reward/mcq/timeouts" in records.messages[0]


def test_a_row_that_cannot_be_graded_stops_the_step(monkeypatch):
    worker, records = make_worker(math_rule.MathRuleRewardWorker, monkeypatch)
    with pytest.raises(RewardDataError, match="no ground_truth"):
        worker.compute_rewards(batch_of(["\\boxed{5}"], [None]))
    worker, _ = make_worker(choice_rule.MultipleChoiceRewardWorker, monkeypatch)
    with pytest.raises(RewardDataError, match="not a single letter"):
        worker.compute_rewards(batch_of(["Answer: A"], ["forty"]))
    assert records.messages == []


def test_require_boxed_scores_replies_without_a_boxed_answer_zero(monkeypatch):
    from roll.utils.math_grader import last_boxed

    replies = ["The answer is 5", "so \\boxed{5}", "\\boxed{4} no wait \\boxed{5}", "\\boxed{\\frac{10}{2}}"]
    lenient, _ = make_worker(math_rule.MathRuleRewardWorker, monkeypatch)
    assert lenient.compute_rewards(batch_of(replies, ["5"] * 4)).batch["scores"].tolist()[:2] == [1.0, 1.0]
    worker = math_rule.MathRuleRewardWorker(
        RewardConfig(name="rewards.math", worker_cls="x.Y", timeout=TIMEOUT_S, require_boxed=True), 0, 1
    )
    worker.initialize()
    assert worker.compute_rewards(batch_of(replies, ["5"] * 4)).batch["scores"].tolist() == [0.0, 1.0, 1.0, 1.0]
    assert last_boxed("a \\boxed{x^{2}} b \\boxed{y") == "x^{2}"  # nested braces; an unclosed one is skipped
