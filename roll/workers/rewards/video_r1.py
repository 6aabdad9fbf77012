"""Video-R1's reward (ROLL's VideoR1RewardWorker): answer accuracy by problem type plus a think/answer format term.

score = accuracy + format, in [0, 2]:

    format    1 when the whole reply is `<think>…</think>` then `<answer>…</answer>` (whitespace between), else 0
    accuracy  on the first `<answer>` block's content (the whole reply without one), against the ground truth read
              the same way, by the row's problem type:
              multiple choice  1 when the first characters agree (after the last \\boxed{…}, if any, and
                               stripping spaces and dots)
              numerical        1 when both round to the same number at 2 decimals and both or neither are written
                               with a decimal point or comma
              regression       1 − relative error, clipped to [0, 1]
              OCR              1 − word error rate, clipped to [0, 1]
              free-form        the mean of ROUGE-1, ROUGE-2 and ROUGE-L F-measures (rouge_score's tokenizer and
                               Porter stemming, rebuilt on NLTK's stemmer)

The problem type is ROLL's `reward_model` column (Video-R1's `problem_type`), or a `problem_type` column, or
`reward_args.problem_type` for every row. The rows are videos in ROLL's examples; the reward reads text only.
"""

import re
from collections import Counter

from roll.distributed.data_proto import DataProto
from roll.utils.grading import RewardDataError
from roll.workers.rewards.base import RewardWorker

PROBLEM_TYPES = ("multiple choice", "numerical", "regression", "OCR", "free-form")
_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
_BOXED = re.compile(r"\\boxed{(.*?)}")
_FORMAT = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)
_NON_ALPHANUMERIC = re.compile(r"[^a-z0-9]+")


def answer_text(text: str) -> str:
    found = _ANSWER.search(text)
    return found.group(1).strip() if found else text


def format_reward(response: str) -> float:
    return 1.0 if _FORMAT.fullmatch(response) else 0.0


def to_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level edit distance / reference words (at least 1)."""
    ref, hyp = reference.split(), hypothesis.split()
    row = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        previous, row[0] = row[0], i
        for j in range(1, len(hyp) + 1):
            current = row[j]
            row[j] = previous if ref[i - 1] == hyp[j - 1] else 1 + min(row[j], row[j - 1], previous)
            previous = current
    return row[-1] / max(1, len(ref))


_STEMMER = None


def rouge_tokens(text: str) -> list[str]:
    """rouge_score's tokenization: lower case, runs of non-alphanumerics split, words over 3 letters stemmed."""
    global _STEMMER
    if _STEMMER is None:
        from nltk.stem.porter import PorterStemmer

        _STEMMER = PorterStemmer()
    words = _NON_ALPHANUMERIC.sub(" ", text.lower()).split()
    return [token for token in (_STEMMER.stem(w) if len(w) > 3 else w for w in words) if token.isalnum()]


def _f_measure(overlap: int, predicted: int, reference: int) -> float:
    precision, recall = overlap / max(predicted, 1), overlap / max(reference, 1)
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def _rouge_n(reference: list, predicted: list, n: int) -> float:
    ref = Counter(tuple(reference[i : i + n]) for i in range(len(reference) - n + 1))
    pred = Counter(tuple(predicted[i : i + n]) for i in range(len(predicted) - n + 1))
    return _f_measure(sum((ref & pred).values()), sum(pred.values()), sum(ref.values()))


def _rouge_l(reference: list, predicted: list) -> float:
    if not reference or not predicted:
        return 0.0
    row = [0] * (len(predicted) + 1)
    for word in reference:  # longest common subsequence, one row at a time
        diagonal = 0
        for j, other in enumerate(predicted, start=1):
            diagonal, row[j] = row[j], diagonal + 1 if word == other else max(row[j], row[j - 1])
    return _f_measure(row[-1], len(predicted), len(reference))


def rouge_mean(reference: str, prediction: str) -> float:
    """Mean F-measure of ROUGE-1, ROUGE-2 and ROUGE-L."""
    ref, pred = rouge_tokens(reference), rouge_tokens(prediction)
    return (_rouge_n(ref, pred, 1) + _rouge_n(ref, pred, 2) + _rouge_l(ref, pred)) / 3


def _first_char(text: str) -> str:
    return text.strip().strip(".")[:1]


def accuracy_reward(response: str, ground_truth: str, problem_type: str) -> float:
    """The accuracy term of the module docstring."""
    output, truth = answer_text(response), answer_text(str(ground_truth))
    if problem_type == "multiple choice":
        output, truth = (_BOXED.findall(t)[-1] if _BOXED.findall(t) else t for t in (output, truth))
        return 1.0 if _first_char(output) == _first_char(truth) else 0.0
    if problem_type == "free-form":
        return max(0.0, min(1.0, rouge_mean(truth, output)))
    if problem_type == "OCR":
        return max(0.0, min(1.0, 1 - word_error_rate(truth, output)))
    if problem_type == "numerical" and any(c in truth for c in ".,") != any(c in output for c in ".,"):
        return 0.0
    gold, guess = to_number(truth), to_number(output)
    if gold is None or guess is None:
        return 0.0
    if problem_type == "numerical":
        return 1.0 if round(gold, 2) == round(guess, 2) else 0.0
    relative = min(1.0, max(0.0, (abs(guess - gold) + 1e-9) / (abs(gold) + 1e-9)))
    return 1.0 - relative  # regression


class VideoR1RewardWorker(RewardWorker):
    needs_ground_truth = True  # rows without one are refused at start-up (roll.pipeline.rlvr.pipeline)

    def _problem_types(self, batch: DataProto) -> list[str]:
        columns = batch.non_tensor_batch
        column = columns.get("reward_model", columns.get("problem_type"))
        default = self.worker_config.reward_args.get("problem_type")
        types = [default] * len(batch) if column is None else [value or default for value in column]
        for row, kind in enumerate(types):
            if kind not in PROBLEM_TYPES:
                raise RewardDataError(
                    f"{self.worker_name} row {row}: problem type {kind!r} (the reward_model or problem_type column, "
                    f"else reward_args.problem_type); valid: {list(PROBLEM_TYPES)}"
                )
        return types

    def score(self, batch: DataProto) -> list[float]:
        unknown = sorted(set(self.worker_config.reward_args) - {"problem_type"})
        if unknown:
            raise ValueError(f"{self.worker_name}.reward_args has unknown keys {unknown}; valid: ['problem_type']")
        types = self._problem_types(batch)
        replies = [str(r) for r in batch.non_tensor_batch["response_text"]]
        formats = [format_reward(r) for r in replies]
        accuracy = self.grade_rows(
            batch,
            lambda r, truth: accuracy_reward(r, truth[1], truth[0]),
            truths=list(zip(types, batch.non_tensor_batch["ground_truth"])),
        )
        self.record_metric("accuracy", accuracy)
        self.record_metric("format", formats)
        return [a + f for a, f in zip(accuracy, formats)]
