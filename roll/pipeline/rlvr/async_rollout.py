"""Off-policy rollout for RLVR (`async_generation_ratio: k` > 0): the engine generates the batches of steps
t+1..t+k while the trainer trains step t.

Policy versions: version v = the trainer's weights after v optimizer steps. The engine serves version t
during step t (the sync at the end of step t-1 loaded it). A generate call submitted during step t runs
before that step's weight sync on the engine (one caller's calls to an actor run in submission order, and
the weight load queues behind them), so each sample records the version current at submission. A sample
trained at step t has lag t - version; the schedule keeps lag <= k, and any batch whose lag exceeds
`async_max_lag` (default k) is regenerated or dropped (async_stale_samples), counted, never trained on.

Data position: prompts of queued steps are drawn ahead, so a checkpoint stores the sampler position before
the oldest queued step's prompts (`data_state`); a resume regenerates those steps with the resumed weights
and no prompt batch is trained twice or skipped.
"""

from collections import deque
from dataclasses import dataclass

import numpy as np

from roll.distributed.data_proto import DataProto


@dataclass
class QueuedRollout:
    step: int  # the pipeline step that will train on it
    rows: list
    version: int  # policy version of the engine when it was submitted
    sampler_state: dict  # sampler position before `rows` were drawn
    call: object  # PendingCall of actor_infer.generate
    pad: int


def stale_action(lag: int, max_lag: int, policy: str) -> str | None:
    """None if a batch with this lag may be trained on, else what to do with it ("regenerate" or "drop")."""
    return None if lag <= max_lag else policy


class AsyncRollout:
    """The queue of in-flight generate calls, owned by an RLVRPipeline."""

    def __init__(self, pipeline):
        config = pipeline.config
        self.pipeline = pipeline
        self.ahead = int(config.async_generation_ratio)
        self.max_lag = self.ahead if config.async_max_lag is None else config.async_max_lag
        self.policy = config.async_stale_samples
        self.queue: deque[QueuedRollout] = deque()
        self.engine_version = 0
        self.counts = {"dropped": 0, "regenerated": 0}  # samples, over the run

    def reset(self, first_step: int) -> None:
        """Start (or restart after recovery/resume): nothing in flight, the engine serves version first_step."""
        self.queue.clear()
        self.engine_version = first_step

    def data_state(self) -> dict | None:
        """The sampler position to checkpoint: before the oldest queued prompts (None: nothing queued)."""
        return self.queue[0].sampler_state if self.queue else None

    def _submit(self, step: int, rows: list | None = None) -> QueuedRollout:
        pipeline = self.pipeline
        state = dict(pipeline.sampler.state_dict())
        if rows is None:
            rows = pipeline.sampler.next_rows(pipeline.config.rollout_batch_size)
        batch, pad = pipeline.generation_request(rows, step)
        call = pipeline.actor_infer.generate.submit(batch)
        return QueuedRollout(step, rows, self.engine_version, state, call, pad)

    def take(self, step: int) -> tuple[list, DataProto, dict]:
        """Step `step`'s rows and generated batch (with `policy_version` per sample), having queued the
        generation of the following steps first so that it overlaps this step's training."""
        last = self.pipeline.config.max_steps - 1
        if not self.queue:
            self.queue.append(self._submit(step))
        head = self.queue[0]
        if head.step != step:
            raise RuntimeError(f"async rollout: the queued batch is for step {head.step}, the trainer is at {step}")
        while self.queue[-1].step < min(step + self.ahead, last):
            self.queue.append(self._submit(self.queue[-1].step + 1))
        self.queue.popleft()
        metrics = {"async/dropped_samples": 0, "async/regenerated_samples": 0}
        item, lag = head, step - head.version
        action = stale_action(lag, self.max_lag, self.policy)
        if action is not None:
            # generate again now; the stale call is still consumed so the engine queue stays in order
            head.call.result()
            item = self._submit(step, rows=head.rows if action == "regenerate" else None)
            lag = step - item.version
        n = self.pipeline.config.num_return_sequences_in_group
        batch = self.pipeline.finish_generation(item.call.result(), item.pad, n)
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

    def after_weight_sync(self) -> None:
        self.engine_version += 1
