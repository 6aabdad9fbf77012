"""Off-policy rollout for RLVR, batch-level (`async_generation_ratio: k` > 0, generate_opt_level 0): the engine
generates the batches of steps t+1..t+k while the trainer trains step t.

Policy versions: version v = the trainer's weights after v optimizer steps. The engine serves version t
during step t (the sync at the end of step t-1 loaded it). A generate call submitted during step t runs
before that step's weight sync on the engine (one caller's calls to an actor run in submission order, and
the weight load queues behind them), so each sample records the version current at submission. A sample
trained at step t has lag t - version; the schedule keeps lag <= k, and any batch whose lag exceeds
`async_max_lag` (default k) is regenerated or dropped (async_stale_samples), counted, never trained on.

Data position: prompts of queued steps are drawn ahead, so a checkpoint stores the sampler position before
the oldest queued step's prompts (`state_dict`); a resume regenerates those steps with the resumed weights
and no prompt batch is trained twice or skipped.
"""

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from roll.distributed.data_proto import DataProto
from roll.pipeline.rlvr.rollout.base import OffPolicy, Rollout, RolloutBatch, stale_action
from roll.utils.progress import StepTimer


@dataclass
class QueuedRollout:
    step: int  # the pipeline step that will train on it
    rows: list
    version: int  # policy version of the engine when it was submitted
    sampler_state: dict  # sampler position before `rows` were drawn
    call: object  # PendingCall of actor_infer.generate
    pad: int


class AsyncBatchRollout(Rollout):
    """The queue of in-flight generate calls. `submit_generation(rows, step)` → (pending generate call, padding
    rows) sends a step's prompts to the engine; `finish_generation(output, pad, group_size)` drops the padding
    and decodes."""

    def __init__(
        self,
        sampler,
        submit_generation: Callable[[list[dict], int], tuple[object, int]],
        finish_generation: Callable[[DataProto, int, int], DataProto],
        compute_rewards: Callable[[DataProto], DataProto],
        batch_size: int,
        group_size: int,
        schedule: OffPolicy,
    ):
        super().__init__(sampler)
        self.submit_generation, self.finish_generation = submit_generation, finish_generation
        self.compute_rewards = compute_rewards
        self.batch_size, self.group_size, self.schedule = batch_size, group_size, schedule
        self.queue: deque[QueuedRollout] = deque()
        self.engine_version = 0
        self.counts = {"dropped": 0, "regenerated": 0}  # samples, over the run (recoveries included)

    @classmethod
    def from_config(cls, config, sampler, submit_generation, finish_generation, compute_rewards):
        return cls(
            sampler,
            submit_generation,
            finish_generation,
            compute_rewards,
            config.rollout_batch_size,
            config.num_return_sequences_in_group,
            OffPolicy.from_config(config),
        )

    def runs_between_steps(self) -> bool:
        return True

    def start(self, first_step: int) -> None:
        self.queue.clear()
        self.engine_version = first_step

    def state_dict(self) -> dict:
        """Before the oldest queued step's prompts (the sampler's position if nothing is queued)."""
        return self.queue[0].sampler_state if self.queue else super().state_dict()

    def after_weight_sync(self) -> None:
        self.engine_version += 1

    def take(self, step: int, timer: StepTimer) -> RolloutBatch:
        """Step `step`'s batch (with `policy_version`/`policy_lag` per sample), having queued the generation of
        the following steps first so that it overlaps this step's training; then its rewards."""
        with timer.phase("generate"):
            rows, batch, metrics = self._generated(step)
        lags = batch.non_tensor_batch["policy_lag"].astype(np.int64)
        with timer.phase("reward"):
            self.compute_rewards(batch)
        return RolloutBatch(batch, rows, metrics, {"async/lag": lags})

    def _submit(self, step: int, rows: list | None = None) -> QueuedRollout:
        state = dict(self.sampler.state_dict())
        if rows is None:
            rows = self.sampler.next_rows(self.batch_size)
        call, pad = self.submit_generation(rows, step)
        return QueuedRollout(step, rows, self.engine_version, state, call, pad)

    def _generated(self, step: int) -> tuple[list, DataProto, dict]:
        last, ahead = self.schedule.last_step, self.schedule.ahead
        if not self.queue:
            self.queue.append(self._submit(step))
        head = self.queue[0]
        if head.step != step:
            raise RuntimeError(f"async rollout: the queued batch is for step {head.step}, the trainer is at {step}")
        while self.queue[-1].step < min(step + ahead, last):
            self.queue.append(self._submit(self.queue[-1].step + 1))
        self.queue.popleft()
        metrics = {"async/dropped_samples": 0, "async/regenerated_samples": 0}
        item, lag = head, step - head.version
        action = stale_action(lag, self.schedule.max_lag, self.schedule.stale)
        if action is not None:
            # generate again now; the stale call is still consumed so the engine queue stays in order
            head.call.result()
            item = self._submit(step, rows=head.rows if action == "regenerate" else None)
            lag = step - item.version
        n = self.group_size
        batch = self.finish_generation(item.call.result(), item.pad, n)
        if action is not None:  # counted once the replacement exists (a failed attempt is redone, not counted)
            name = "dropped" if action == "drop" else "regenerated"
            metrics[f"async/{name}_samples"] = len(head.rows) * n
            self.counts[name] += len(head.rows) * n
        batch.non_tensor_batch["policy_version"] = np.full(len(batch), item.version, dtype=object)
        batch.non_tensor_batch["policy_lag"] = np.full(len(batch), lag, dtype=object)
        metrics.update({"async/lag": float(lag), "async/queued_steps": len(self.queue)})
        metrics["async/dropped_samples_total"] = self.counts["dropped"]
        metrics["async/regenerated_samples_total"] = self.counts["regenerated"]
        return item.rows, batch, metrics
