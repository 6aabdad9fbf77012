"""Test double for timing tests: the real ActorWorker with its real hf_infer engine, slowed by a sleep in every
forward pass, so that a generate call outlasts a training step (request-level rollout: a weight sync then
finds requests in flight)."""

import time

from roll.distributed.decorator import Dispatch, register
from roll.workers.actor_worker import ActorWorker

SECONDS_PER_FORWARD = 0.1


class SlowEngineWorker(ActorWorker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        super().initialize(total_steps)
        self.strategy.model.register_forward_hook(lambda *_: time.sleep(SECONDS_PER_FORWARD))
