"""CrossThinkQA reward: answer letter + repetition penalty + response_length_penalty_coef · length reward.

As in ROLL the sum is taken in float16 and the length reward reads the *padded* responses width
(sequence_length − prompt_length), so it is one constant for the whole batch (0 once the width exceeds
400): −0.5 below 100, 0 above 400, −0.5·(400 − width)/300 between. The repetition penalty is
`max_penalty · (1 − distinct n-grams / n-grams)` over the response's words (reward_args `ngram_size`,
default 3, and `max_penalty` ≤ 0, default 0 = off).

With `reward_type` (ROLL's loose | soft | strict) the answer term follows ROLL's table instead of 1/0: the answer
is the last \\boxed{...} (formatted) or else the text after the last "answer is" (or the whole reply), its
first capital letter is compared with the truth's first character, and (right, formatted) → 1 for all three;
right but unformatted → 1 / 0.5 / −1; wrong but formatted → −1 / −0.5 / −1; wrong and unformatted → −1.
"""

import torch

from roll.distributed.data_proto import DataProto
from roll.workers.rewards.base import RewardWorker
from roll.workers.rewards.choice_rule import boxed_choice, grade_choice

# (right, formatted) → reward for loose, soft, strict
TABLE = {
    (True, True): (1.0, 1.0, 1.0),
    (True, False): (1.0, 0.5, -1.0),
    (False, True): (-1.0, -0.5, -1.0),
    (False, False): (-1.0, -1.0, -1.0),
}


def graded_by_type(response: str, ground_truth: str, reward_type: str) -> float:
    letter, boxed = boxed_choice(response)
    right = letter is not None and letter == str(ground_truth)[:1]
    return TABLE[(right, boxed)][("loose", "soft", "strict").index(reward_type)]


def length_reward(width: int) -> float:
    if width < 100:
        return -0.5
    if width > 400:
        return 0.0
    return -0.5 * (400 - width) / 300


def repetition_penalty(response: str, ngram_size: int, max_penalty: float) -> float:
    words = response.lower().split()
    if max_penalty == 0 or len(words) < ngram_size:
        return 0.0
    ngrams = list(zip(*(words[i:] for i in range(ngram_size))))
    return max_penalty * (1 - len(set(ngrams)) / len(ngrams))


class CrossThinkQARuleRewardWorker(RewardWorker):
    needs_ground_truth = True  # rows without one are refused at start-up (roll.pipeline.rlvr.pipeline)

    def score(self, batch: DataProto) -> list[float]:
        args = self.worker_config.reward_args
        ngram_size, max_penalty = int(args.get("ngram_size", 3)), float(args.get("max_penalty", 0.0))
        if max_penalty > 0:
            raise ValueError(f"{self.worker_name}.reward_args.max_penalty = {max_penalty}: must be ≤ 0")
        kind = self.worker_config.reward_type
        correct = self.grade_rows(batch, grade_choice if kind is None else lambda r, t: graded_by_type(r, t, kind))
        repeat = [repetition_penalty(r, ngram_size, max_penalty) for r in batch.non_tensor_batch["response_text"]]
        length = length_reward(batch.batch["responses"].shape[-1])
        half = torch.float16
        total = (
            torch.tensor(correct, dtype=half)
            + torch.tensor(repeat, dtype=half)
            + torch.tensor(self.worker_config.response_length_penalty_coef, dtype=half)
            * torch.tensor(length, dtype=half)
        )
        return total.float().tolist()
