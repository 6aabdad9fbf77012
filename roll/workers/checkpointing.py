"""Checkpoint methods of the trained roles (actor_train, critic): the engine state from the strategy
plus each worker's RNG state, so dropout or any sampling inside a worker continues the same stream
after a resume."""

from pathlib import Path

import torch

from roll.distributed.decorator import Dispatch, register
from roll.utils.checkpoint import load_state
from roll.utils.seeding import get_rng_state, set_rng_state


class CheckpointMixin:
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, path: str) -> None:
        self.strategy.save_checkpoint(path)
        torch.save(get_rng_state(), _rng_file(path, self.rank))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, path: str) -> None:
        self.strategy.load_checkpoint(path)
        rng_file = _rng_file(path, self.rank)
        if not rng_file.is_file():
            raise FileNotFoundError(
                f"{self.worker_name}: {path} has no {rng_file.name}; was it saved with "
                f"a different number of {self.worker_name} workers ({self.world_size} now)?"
            )
        set_rng_state(load_state(rng_file))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def state_checksum(self) -> float:
        return self.strategy.state_checksum()


def _rng_file(path: str, rank: int) -> Path:
    return Path(path) / f"rng_state_rank{rank}.pt"
