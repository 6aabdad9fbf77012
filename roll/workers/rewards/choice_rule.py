"""Rule-based multiple-choice rewards.

MultipleChoiceRewardWorker (roll's own): 1.0 when the response's final choice letter equals the ground truth.
The final choice is the last of: `\\boxed{C}`, `Answer: C` / `answer is (C)`, or a lone letter on the
last line. Letters A–J are recognised; a response with no recognisable choice scores 0.

MultipleChoiceBoxedRuleRewardWorker (ROLL's, by its dotted path): 1.0 only when the answer after the last
`</think>` is boxed and its first capital letter is the truth's (grade_boxed_choice).
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


# ROLL's boxed multiple-choice rule (MultipleChoiceBoxedRuleRewardWorker; also CrossThinkQA's reward_type table)
_BOXED_CONTENT = re.compile(r"\\boxed\{([^}]+)\}")
_ANSWER_IS = "answer is"


def boxed_choice(response: str) -> tuple[str | None, bool]:
    """(the letter a reply commits to, whether it was boxed), read as ROLL reads it: the last `\\boxed{…}`'s
    content, else the text after the last "answer is", else the whole reply; the letter is that text's first
    capital letter (None without one)."""
    boxed = _BOXED_CONTENT.findall(response)
    if boxed:
        answer = boxed[-1]
    else:
        cut = response.lower().rfind(_ANSWER_IS)
        answer = response if cut < 0 else response[cut + len(_ANSWER_IS) :]
    return next((c for c in answer if c.isupper()), None), bool(boxed)


def after_last_think(response: str) -> str:
    """The reply after its last `</think>` (leading newlines dropped); the whole reply without one."""
    cut = response.rfind("</think>")
    return response if cut < 0 else response[cut + len("</think>") :].lstrip("\n")


def truth_letter(ground_truth) -> str:
    """A multiple-choice ground truth's letter: "C", "(C)", "c" or "C. Paris" → "C"."""
    found = re.match(r"\s*\(?([A-Za-z])(?![A-Za-z])", str(ground_truth or ""))
    if found is None:
        raise RewardDataError(
            f"boxed multiple-choice reward: ground_truth {ground_truth!r} does not start with a choice letter"
        )
    return found.group(1).upper()


def grade_boxed_choice(response: str, ground_truth) -> float:
    """1 when the reply's final part (after_last_think) boxes an answer whose first capital letter is the
    truth's letter; an unboxed answer scores 0 even when right."""
    letter, boxed = boxed_choice(after_last_think(response))
    return 1.0 if boxed and letter == truth_letter(ground_truth) else 0.0


class MultipleChoiceBoxedRuleRewardWorker(RewardWorker):
    """ROLL's MultipleChoiceBoxedRuleRewardWorker: right only with the letter in \\boxed{} (grade_boxed_choice);
    logs reward/<domain>/boxed, the share of replies with a \\boxed{} answer."""

    needs_ground_truth = True  # rows without one are refused at start-up (roll.pipeline.rlvr.pipeline)

    def score(self, batch: DataProto) -> list[float]:
        replies = batch.non_tensor_batch["response_text"]
        self.record_metric("boxed", [boxed_choice(after_last_think(str(r)))[1] for r in replies])
        return self.grade_rows(batch, grade_boxed_choice)  # rewards.<domain>.timeout per row
