"""Rule-based math reward: 1.0 when math-verify finds the response's answer equal to the ground truth
(with rewards.<domain>.require_boxed: the answer of the response's last \\boxed{}, 0 without one)."""

import functools

from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.utils.math_grader import exact_integer_match, grade_math
from roll.workers.rewards.base import RewardWorker


class MathRuleRewardWorker(RewardWorker):
    needs_ground_truth = True  # rows without one are refused at start-up (roll.pipeline.rlvr.pipeline)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        # math-verify sets itself up on its first call (~0.05 s, far more on a loaded machine): not on the
        # first row's time limit
        grade_math("\\boxed{1}", "1")

    def score(self, batch: DataProto) -> list[float]:
        # a reply that is only a boxed integer is graded inline (it also passes require_boxed); others by
        # math-verify, rewards.<domain>.timeout per row
        strict = self.worker_config.require_boxed
        grade = functools.partial(grade_math, require_boxed=True) if strict else grade_math
        return self.grade_rows(batch, grade, fast=exact_integer_match)
