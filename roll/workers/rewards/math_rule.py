"""Rule-based math reward: 1.0 when math-verify finds the response's answer equal to the ground truth."""

from roll.distributed.data_proto import DataProto
from roll.workers.rewards.base import RewardWorker
from roll.workers.rewards.math_verify_grader import grade


class MathRuleRewardWorker(RewardWorker):
    def score(self, batch: DataProto) -> list[float]:
        timeout = getattr(self.worker_config, "timeout", 5.0)
        return [
            grade(response, truth, timeout)
            for response, truth in zip(batch.non_tensor_batch["response_text"], batch.non_tensor_batch["ground_truth"])
        ]
