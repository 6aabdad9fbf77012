"""Reward workers: subclass `RewardWorker` and implement `score(batch) -> list[float]`.

The pipeline hands each domain the rows whose `tag` it includes, with `prompt_text`,
`response_text` and `ground_truth` as non-tensor columns (decoded once on the driver), and puts the
returned score on each response's last token. A user's class lives in their own module and is named
by dotted path in `rewards.<domain>.worker_cls`.
"""

import math
from numbers import Real

import torch

from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.distributed.worker import Worker


class RewardWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        """Override to load resources (a reward model, a test-case store); called once."""

    def score(self, batch: DataProto) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} must implement score(batch) -> list[float]")

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def compute_rewards(self, batch: DataProto) -> DataProto:
        scores = list(self.score(batch))
        if len(scores) != len(batch):
            raise ValueError(f"{type(self).__name__}.score returned {len(scores)} scores for {len(batch)} rows")
        for row, value in enumerate(scores):  # Python or numpy numbers; not tensors, strings or None
            if not isinstance(value, Real) or not math.isfinite(value):
                raise ValueError(
                    f"{type(self).__name__}.score: row {row} has score {value!r}; scores must be finite numbers"
                )
        return DataProto.from_dict(tensors={"scores": torch.tensor([float(v) for v in scores], dtype=torch.float32)})
