r"""Final-answer reward for the SmolLM2 example: the reply's last `\boxed{}` content, or without a box its
last number, must equal the ground truth (integer comparison).

Why not math-verify on the whole reply here: with lenient extraction it credits replies that only restate
the question ("19 + 11 = ?" scores 1 for 30: it evaluates the expression) or contain the sum somewhere
before a wrong answer; a first SmolLM2 run learned exactly that (docs/results.md).

    rewards:
      math:
        worker_cls: final_answer.FinalAnswerRewardWorker    # PYTHONPATH=examples/smollm2_rlvr
"""

import re

from roll.utils.grading import RewardDataError
from roll.workers.rewards import RewardWorker

_BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
_NUMBER = re.compile(r"-?[0-9][0-9,]*(?:\.[0-9]+)?")


def final_answer(reply: str) -> str | None:
    """The last boxed content when the reply has a box, else its last number; None if neither."""
    boxes = _BOXED.findall(reply)
    if boxes:
        return boxes[-1]
    numbers = _NUMBER.findall(reply)
    return numbers[-1] if numbers else None


def grade_final_answer(reply: str, ground_truth) -> float:
    if ground_truth is None:
        raise RewardDataError("final-answer reward: the row has no ground_truth")
    answer = final_answer(reply)
    if answer is None:
        return 0.0
    try:
        return 1.0 if float(answer.replace(",", "")) == float(str(ground_truth)) else 0.0
    except ValueError:  # a box holding text or an expression
        return 0.0


class FinalAnswerRewardWorker(RewardWorker):
    def score(self, batch) -> list[float]:
        return self.grade_rows(batch, grade_final_answer, fast=grade_final_answer)  # a regex: no thread needed
