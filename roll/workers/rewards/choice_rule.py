"""Rule-based multiple-choice reward: 1.0 when the response's final choice letter equals the ground truth.

The final choice is the last of: `\\boxed{C}`, `Answer: C` / `answer is (C)`, or a lone letter on the
last line. Letters A–J are recognised; a response with no recognisable choice scores 0.
"""

import re

from roll.distributed.data_proto import DataProto
from roll.utils.grading import RewardDataError
from roll.workers.rewards.base import RewardWorker

_PATTERNS = (
    re.compile(r"\\boxed\{\s*\(?([A-J])\)?\s*\}"),
    re.compile(r"answer\s*(?:is|:)?\s*\(?([A-J])\)?(?![A-Za-z])", re.IGNORECASE),
    re.compile(r"^\s*\(?([A-J])\)?[.)]?\s*$", re.MULTILINE),
)


def final_choice(response: str) -> str | None:
    """The last choice letter the response commits to, trying the most explicit form first."""
    for pattern in _PATTERNS:
        found = pattern.findall(response)
        if found:
            return found[-1].upper()
    return None


def grade_choice(response: str, ground_truth: str) -> float:
    truth = str(ground_truth).strip().strip("()").upper()
    if not re.fullmatch(r"[A-J]", truth):
        raise RewardDataError(f"multiple-choice reward: ground_truth {ground_truth!r} is not a single letter A-J")
    return 1.0 if final_choice(response) == truth else 0.0


class MultipleChoiceRewardWorker(RewardWorker):
    needs_ground_truth = True  # rows without one are refused at start-up (roll.pipeline.rlvr.pipeline)

    def score(self, batch: DataProto) -> list[float]:
        return self.grade_rows(batch, grade_choice)  # rewards.<domain>.timeout per row
