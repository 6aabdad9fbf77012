"""rollout_mock around any rollout mode (roll.pipeline.core.rollout_dump.RolloutStore): dump mode stores what
the mode's `take` returns; mock mode replaces the mode, and nothing is generated (no engine call, no prompt
drawn)."""

import dataclasses

from roll.pipeline.rlvr.rollout.base import Rollout, RolloutBatch
from roll.utils.progress import StepTimer


class RecordedRollout(Rollout):
    """Dump mode: the wrapped mode's batches, each stored as it is handed to training."""

    def __init__(self, inner: Rollout, store):
        super().__init__(inner.sampler)
        self.inner, self.store = inner, store

    def take(self, step: int, timer: StepTimer) -> RolloutBatch:
        taken = self.inner.take(step, timer)
        if taken.scoring is None:
            self.store.save("train", step, taken)
            return taken
        # a mode that leaves scoring to the pipeline (the plain one, beside the forward passes): the dump is
        # written once the batch is scored, as ROLL's holds scored rollouts; the overlap stays
        inner_scoring = taken.scoring

        def scoring(batch):
            scored = inner_scoring(batch)
            self.store.save("train", step, dataclasses.replace(taken, batch=scored, scoring=None))
            return scored

        return dataclasses.replace(taken, scoring=scoring)

    def start(self, first_step: int) -> None:
        self.inner.start(first_step)

    def before_weight_sync(self, timer: StepTimer) -> None:
        self.inner.before_weight_sync(timer)

    def after_weight_sync(self) -> None:
        self.inner.after_weight_sync()

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)

    def close(self) -> None:
        self.inner.close()


class ReplayRollout(Rollout):
    """Mock mode: each step's batch (samples, prompt rows, the mode's metrics) as a dump run stored it."""

    def __init__(self, sampler, store):
        super().__init__(sampler)
        self.store = store

    def take(self, step: int, timer: StepTimer) -> RolloutBatch:
        with timer.phase("generate"):
            return self.store.around("train", step, None)
