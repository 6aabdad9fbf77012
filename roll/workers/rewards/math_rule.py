"""Rule-based math reward: 1.0 when math-verify finds the response's answer equal to the ground truth."""

from roll.distributed.data_proto import DataProto
from roll.workers.rewards.base import RewardWorker
from roll.workers.rewards.math_verify_grader import grade_math


class MathRuleRewardWorker(RewardWorker):
    def score(self, batch: DataProto) -> list[float]:
        return self.grade_rows(batch, grade_math)  # rewards.<domain>.timeout per row
