"""Rule-based format reward: 1.0 when the response states a final answer as `\\boxed{...}`, else 0.0.

Meant as one scorer of a domain beside an answer reward (rewards.<domain>.scorers,
docs/reward_domains_multi.md): it does not look at the ground truth.
"""

from roll.distributed.data_proto import DataProto
from roll.workers.rewards.base import RewardWorker


def has_boxed_answer(response: str) -> bool:
    """A `\\boxed{` whose braces close and enclose something other than whitespace."""
    start = response.find("\\boxed{")
    while start != -1:
        depth, index = 1, start + len("\\boxed{")
        body_start = index
        while index < len(response) and depth:
            depth += {"{": 1, "}": -1}.get(response[index], 0)
            index += 1
        if depth == 0 and response[body_start : index - 1].strip():
            return True
        start = response.find("\\boxed{", start + 1)
    return False


def grade_format(response: str, ground_truth) -> float:
    return 1.0 if has_boxed_answer(response) else 0.0


class BoxedFormatRewardWorker(RewardWorker):
    def score(self, batch: DataProto) -> list[float]:
        return self.grade_rows(batch, grade_format)  # rewards.<domain>.scorers[i].timeout per row
