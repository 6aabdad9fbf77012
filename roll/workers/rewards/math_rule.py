"""Rule-based math reward: 1.0 when math-verify finds the response's answer equal to the ground truth
(with rewards.<domain>.require_boxed: the answer of the response's last \\boxed{}, 0 without one).

What is graded is the reply's final answer (`final_answer_text`): the text after its last `</think>` (as ROLL:
numbers in the reasoning are not the answer), and within that the last `<answer>…</answer>` block's content
when there is one, the tags ROLL's vision-language prompts ask for (math-verify alone reads no number in
"<answer>5</answer>", and would grade a number of the reasoning instead).
"""

import re

from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.utils.math_grader import exact_integer_match, grade_math
from roll.workers.rewards.base import RewardWorker

END_THINK = "</think>"
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def final_answer_text(response: str) -> str:
    """The part of a reply the math rule grades (module docstring)."""
    if not isinstance(response, str):
        return response
    answer = response.rpartition(END_THINK)[2] if END_THINK in response else response
    blocks = _ANSWER_BLOCK.findall(answer)
    return blocks[-1].strip() if blocks else answer


def grade_final_answer(response: str, ground_truth) -> float:
    return grade_math(final_answer_text(response), ground_truth)


def grade_boxed_final_answer(response: str, ground_truth) -> float:
    return grade_math(final_answer_text(response), ground_truth, require_boxed=True)


def fast_final_answer(response: str, ground_truth) -> float | None:
    return exact_integer_match(final_answer_text(response), ground_truth)


class MathRuleRewardWorker(RewardWorker):
    needs_ground_truth = True  # rows without one are refused at start-up (roll.pipeline.rlvr.pipeline)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        # math-verify sets itself up on its first call (~0.05 s, far more on a loaded machine): not on the
        # first row's time limit
        grade_math("\\boxed{1}", "1")

    def score(self, batch: DataProto) -> list[float]:
        # a final answer that is only a boxed integer is graded inline (it also passes require_boxed); others
        # by math-verify, rewards.<domain>.timeout per row
        grade = grade_boxed_final_answer if self.worker_config.require_boxed else grade_final_answer
        return self.grade_rows(batch, grade, fast=fast_final_answer)
