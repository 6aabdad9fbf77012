r"""A user-defined reward for roll: answer format (a regular expression) with a length penalty.

Plugged in by dotted path in the YAML (see rlvr_custom_reward.yaml and README.md):

    rewards:
      format:
        worker_cls: my_rewards.FormatRewardWorker
        reward_args: {pattern: '\\boxed\{\d+\}', length_penalty: 0.01}

It never looks at the ground truth: it rewards well-formed, short replies, e.g. to teach a model an
answer format before (or alongside) a correctness reward.
"""

import re

from roll.workers.rewards import RewardWorker

DEFAULTS = {"pattern": r"\\boxed\{-?\d+\}", "length_penalty": 0.0}


def format_reward(response: str, response_tokens: int, pattern: str, length_penalty: float) -> float:
    """1.0 when the whole reply (surrounding spaces ignored) matches `pattern`, else 0.0; minus
    `length_penalty` per generated token (EOS included)."""
    matched = re.fullmatch(pattern, response.strip()) is not None
    return (1.0 if matched else 0.0) - length_penalty * response_tokens


class FormatRewardWorker(RewardWorker):
    def initialize(self, total_steps: int = 0) -> None:
        """Called once per worker: check `reward_args` here so a typo fails at start-up, not mid-run."""
        args = dict(self.worker_config.reward_args)
        unknown = sorted(set(args) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"{self.worker_name}.reward_args: unknown keys {unknown}; valid: {sorted(DEFAULTS)}")
        self.settings = {**DEFAULTS, **args}
        re.compile(self.settings["pattern"])  # a bad pattern fails here

    def score(self, batch) -> list[float]:
        """One score per row. Rows carry the decoded `response_text` (and `prompt_text`, `ground_truth`,
        `tag`) plus the token tensors; `response_mask` marks the generated tokens."""
        lengths = batch.batch["response_mask"].sum(-1).long().tolist()
        return [
            format_reward(text, n, self.settings["pattern"], self.settings["length_penalty"])
            for text, n in zip(batch.non_tensor_batch["response_text"], lengths)
        ]
