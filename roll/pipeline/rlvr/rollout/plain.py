"""The synchronous rollout: each step draws `batch_size` prompts, generates their groups with the weights of
the step before, and hands the pipeline the call that scores them (it runs beside the forward passes)."""

from collections.abc import Callable

from roll.distributed.data_proto import DataProto
from roll.pipeline.rlvr.rollout.base import Rollout, RolloutBatch
from roll.utils.progress import StepTimer


class PlainRollout(Rollout):
    def __init__(
        self,
        sampler,
        generate: Callable[[list[dict], int], DataProto],
        compute_rewards: Callable[[DataProto], DataProto],
        batch_size: int,
    ):
        super().__init__(sampler)
        self.generate, self.compute_rewards, self.batch_size = generate, compute_rewards, batch_size

    def take(self, step: int, timer: StepTimer) -> RolloutBatch:
        rows = self.sampler.next_rows(self.batch_size)
        with timer.phase("generate"):
            batch = self.generate(rows, step)
        # scored by the pipeline, at once with the forward passes ("reward" in its timings)
        return RolloutBatch(batch, rows, scoring=self.compute_rewards)

    @classmethod
    def from_config(cls, config, sampler, generate, compute_rewards) -> "PlainRollout":
        return cls(sampler, generate, compute_rewards, config.rollout_batch_size)
