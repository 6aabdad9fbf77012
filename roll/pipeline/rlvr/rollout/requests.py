"""Request-level rollout for RLVR (`generate_opt_level: 1`): prompts stream to the engine as requests, each
finished group streams to the reward workers while generation goes on, and the trainer takes a step's batch
once all its groups are scored. With `async_generation_ratio: k` the engine may run up to k steps ahead.

Two driver threads do the streaming: the dispatcher keeps one `generate_requests` call (a few prompt groups,
each prompt × num_return_sequences_in_group requests) in flight per actor_infer worker and collects what
comes back; a finished group goes to the scorer thread (`compute_rewards`). The trainer thread opens steps
(draws their prompts), takes batches and syncs weights.

Policy versions and the weight sync: version v = the trainer's weights after v optimizer steps; every
generated token records the version that produced it. Before a weight sync the dispatcher stops sending
calls and the calls in flight end on the old weights — run to their end, or, with `partial_rollout: true`,
aborted at the next token: an aborted request is resumed after the sync from its prompt plus the tokens it
has, on the new weights (its tokens then come from two versions; the rollout log-probs of each are those of
the version that sampled it, so rollout importance sampling sees the true behaviour policy). A sample's lag
is step − the oldest version among its tokens; a group with a sample older than `async_max_lag` is
regenerated or dropped (async_stale_samples), counted, never trained on.

Unlike the batch-level rollout (generate_opt_level 0), when a request runs relative to a weight sync depends
on timing, so runs with k > 0 are not bit-reproducible; every step still trains on its own prompts.
"""

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from roll.data.prompts import collate_prompts
from roll.distributed.data_proto import DataProto
from roll.pipeline.rlvr.reward_metrics import merge_worker_metrics
from roll.pipeline.rlvr.rollout.base import OffPolicy, Rollout, RolloutBatch, stale_action
from roll.utils.functional import rollout_tensors
from roll.utils.progress import StepTimer


@dataclass
class Sample:
    prompt_ids: list[int]
    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the policy version that sampled each token
    done: bool = False
    segments: int = 0  # requests it took: > 1 = resumed after a partial-rollout abort


@dataclass(eq=False)  # identity: a group is one object through its life
class Group:
    """One prompt's num_return_sequences_in_group samples, trained at `step`."""

    step: int
    index: int  # the prompt's place in its step (uid "<step>-<index>")
    row: dict
    samples: list[Sample]
    scored: Future | None = None  # the scorer thread's DataProto
    attempt: int = 0  # regenerations: part of the sampling seeds


@dataclass(frozen=True)
class RequestSettings:
    seed: int  # the run's: part of every request's sampling seed
    batch_size: int  # prompts per step (rollout_batch_size)
    group_size: int  # samples per prompt (num_return_sequences_in_group)
    prompt_length: int
    max_new_tokens: int  # actor_infer.generating_args.max_new_tokens: a sample's response tokens, all segments
    partial: bool  # partial_rollout: abort the requests in flight at a weight sync, resume them after it

    @classmethod
    def from_config(cls, config) -> "RequestSettings":
        return cls(
            config.seed,
            config.rollout_batch_size,
            config.num_return_sequences_in_group,
            config.prompt_length,
            config.actor_infer.generating_args.max_new_tokens,
            config.partial_rollout,
        )


class RequestRollout(Rollout):
    """Dependencies: `engine()` → the actor_infer Cluster as it is now (roles restart on a recovery and this
    object outlives them), of which it uses world_size, rpc_timeout, generate_requests.submit, abort_requests
    and first_finished; `use_engine()` gives the engine its turn on shared devices; `finish_generation(batch,
    pad, group_size)` decodes the responses; `compute_rewards(batch)` scores a group (on the scorer thread)."""

    def __init__(
        self,
        sampler,
        engine: Callable[[], object],
        use_engine: Callable[[], None],
        finish_generation: Callable[[DataProto, int, int], DataProto],
        compute_rewards: Callable[[DataProto], DataProto],
        pad_token_id: int,
        settings: RequestSettings,
        schedule: OffPolicy,
    ):
        super().__init__(sampler)
        self.engine, self.use_engine = engine, use_engine
        self.finish_generation, self.compute_rewards = finish_generation, compute_rewards
        self.pad_token_id, self.settings, self.schedule = pad_token_id, settings, schedule
        self.ahead, self.max_lag, self.policy = schedule.ahead, schedule.max_lag, schedule.stale
        self.n, self.max_new_tokens, self.partial = settings.group_size, settings.max_new_tokens, settings.partial
        self.cond = threading.Condition()
        self.threads: list[threading.Thread] = []
        self.scorer: ThreadPoolExecutor | None = None
        self.counts = {"dropped": 0, "regenerated": 0}  # samples, over the run
        self.version, self.stopping, self.error, self.paused = 0, False, None, False
        self.steps: dict[int, tuple[dict, list[Group]]] = {}  # opened step → (sampler state before it, groups)

    @classmethod
    def from_config(cls, config, sampler, engine, use_engine, finish_generation, compute_rewards, pad_token_id):
        settings, schedule = RequestSettings.from_config(config), OffPolicy.from_config(config)
        return cls(sampler, engine, use_engine, finish_generation, compute_rewards, pad_token_id, settings, schedule)

    # ---- lifecycle (the trainer thread) ------------------------------------------------------------------------
    def runs_between_steps(self) -> bool:
        return True

    def start(self, first_step: int) -> None:
        """A (re)start: the threads of an earlier attempt end, nothing is in flight, the engine serves
        version first_step."""
        self.close()
        self.version, self.stopping, self.error, self.paused = first_step, False, None, False
        self.world = self.engine().world_size
        # a call carries this many groups: each step's prompts take >= 2 calls per worker, so groups stream
        self.groups_per_call = max(1, math.ceil(self.settings.batch_size / (2 * self.world)))
        self.steps: dict[int, tuple[dict, list[Group]]] = {}  # opened step → (sampler state before it, groups)
        self.pending: deque[tuple[Group, int]] = deque()  # (group, sample) requests waiting for a worker
        self.in_flight: dict[int, tuple] = {}  # rank → (call, [(group, sample)], version, request ids)
        self.step_counts = {"aborted": 0, "resumed": 0, "overlapped": 0}
        self.scorer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-scorer")
        self.threads = [threading.Thread(target=self._dispatch_loop, name="rollout-dispatcher", daemon=True)]
        self.threads[0].start()

    def close(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        for thread in self.threads:
            thread.join(timeout=60)
        self.threads = []
        if self.scorer is not None:
            self.scorer.shutdown(wait=False, cancel_futures=True)
            self.scorer = None

    def state_dict(self) -> dict:
        """Before the oldest opened step's prompts (the sampler's position if none is open)."""
        with self.cond:
            opened = self.steps[min(self.steps)][0] if self.steps else None
        return opened or super().state_dict()

    # ---- the trainer's side ----------------------------------------------------------------------------------
    def take(self, step: int, timer: StepTimer) -> RolloutBatch:
        with timer.phase("generate_and_reward"):
            rows, batch, metrics = self._scored(step)
        return RolloutBatch(batch, rows, metrics, {"async/lag": batch.non_tensor_batch["policy_lag"].astype(np.int64)})

    def _scored(self, step: int) -> tuple[list, DataProto, dict]:
        """Step `step`'s rows and scored batch (with `policy_version`/`policy_lag` per sample), having opened
        the steps up to step + k so that their generation overlaps this step's training."""
        last = self.schedule.last_step
        self.use_engine()
        for ahead in range(step, min(step + self.ahead, last) + 1):
            if ahead not in self.steps:
                self._open(ahead)
        metrics = {"async/dropped_samples": 0, "async/regenerated_samples": 0}
        while True:
            groups = self._wait_scored(step)
            stale = [g for g in groups if stale_action(self._lag(step, g), self.max_lag, self.policy)]
            if not stale:
                break
            with self.cond:  # replace them, ahead of every other request, and wait again
                for group in stale:
                    name = "dropped" if self.policy == "drop" else "regenerated"
                    metrics[f"async/{name}_samples"] += self.n
                    self.counts[name] += self.n
                    if self.policy == "drop":
                        group.row = self.sampler.next_rows(1)[0]
                    self._restart(group)
                self.cond.notify_all()
        with self.cond:
            del self.steps[step]
            counts, self.step_counts = self.step_counts, {"aborted": 0, "resumed": 0, "overlapped": 0}
        parts = [group.scored.result() for group in groups]
        batch = DataProto.concat(parts)
        batch.meta_info["reward_metrics"] = merge_worker_metrics(*parts)
        samples = [sample for group in groups for sample in group.samples]
        versions = np.array([min(s.versions, default=self.version) for s in samples], dtype=np.int64)
        batch.non_tensor_batch["policy_version"] = versions.astype(object)
        batch.non_tensor_batch["policy_lag"] = (step - versions).astype(object)
        metrics.update(
            {
                "async/lag": float((step - versions).mean()),
                "async/lag_max": float((step - versions).max()),
                "async/queued_steps": len(self.steps),
                "async/partial_samples": sum(s.segments > 1 for s in samples),
                "async/aborted_requests": counts["aborted"],
                "async/resumed_requests": counts["resumed"],
                # groups whose scoring started while a generate call was in flight: rewards overlapping generation
                "async/groups_scored_while_generating": counts["overlapped"],
                "async/dropped_samples_total": self.counts["dropped"],
                "async/regenerated_samples_total": self.counts["regenerated"],
            }
        )
        return [group.row for group in groups], batch, metrics

    def before_weight_sync(self, timer: StepTimer) -> None:
        """New weights load only between calls: stop sending, and let the calls in flight end (aborted at the
        next token with partial_rollout; their requests resume after the sync)."""
        with timer.phase("rollout_wait"):
            with self.cond:
                self.paused = True
                calls = list(self.in_flight.items())
            if self.partial:
                for rank, (_, _, _, ids) in calls:
                    self.engine().abort_requests(rank, ids)
            with self.cond:
                while self.in_flight and self.error is None:
                    self.cond.wait(0.05)
                self._raise_error()

    def after_weight_sync(self) -> None:
        with self.cond:
            self.version += 1
            self.paused = False
            self.cond.notify_all()

    # ---- bookkeeping (under self.cond) ------------------------------------------------------------------------
    def _open(self, step: int) -> None:
        state = dict(self.sampler.state_dict())
        rows = self.sampler.next_rows(self.settings.batch_size)
        groups = [Group(step, i, row, []) for i, row in enumerate(rows)]
        with self.cond:
            self.steps[step] = (state, groups)
            for group in groups:
                self._restart(group, first=True)
            self.cond.notify_all()

    def _restart(self, group: Group, first: bool = False) -> None:
        """(Re)generate all of the group's samples, ahead of other requests unless it is new."""
        if not first:
            group.attempt += 1
            self.pending = deque((g, j) for g, j in self.pending if g is not group)
        prompt = group.row["prompt_ids"]
        group.samples, group.scored = [Sample(list(prompt)) for _ in range(self.n)], None
        requests = [(group, j) for j in range(self.n)]
        self.pending.extend(requests) if first else self.pending.extendleft(reversed(requests))

    def _lag(self, step: int, group: Group) -> int:
        return max(step - min(s.versions, default=self.version) for s in group.samples)

    def _wait_scored(self, step: int) -> list[Group]:
        groups = self.steps[step][1]
        while True:
            with self.cond:
                self._raise_error()
                ready = all(g.scored is not None for g in groups)
                if not ready:
                    self.cond.wait(0.05)
                    continue
            for group in groups:
                group.scored.exception()  # wait for the scorer; its error surfaces in result() below
            return groups

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    # ---- the dispatcher thread ------------------------------------------------------------------------------------
    def _dispatch_loop(self) -> None:
        try:
            while True:
                with self.cond:
                    if self.stopping:
                        return
                    if not self.paused:
                        self._send_calls()
                    calls = {rank: call for rank, (call, *_) in self.in_flight.items()}
                    if not calls:
                        self.cond.wait(0.05)
                        continue
                rank = self.engine().first_finished(calls, timeout=0.05)
                if rank is None:
                    self._check_timeouts()
                    continue
                self._collect(rank)
        except BaseException as error:  # noqa: BLE001 — handed to the trainer thread, which raises it
            with self.cond:
                self.error = error
                self.cond.notify_all()

    def _send_calls(self) -> None:
        for rank in range(self.world):
            if rank in self.in_flight or not self.pending:
                continue
            batch, groups = [], set()
            while self.pending and (len(groups) < self.groups_per_call or self.pending[0][0] in groups):
                group, j = self.pending.popleft()
                groups.add(group)
                batch.append((group, j, group.samples[j]))
            requests = [self._request(group, j) for group, j, _ in batch]
            call = self.engine().generate_requests.submit(rank, requests)
            self.in_flight[rank] = (call, batch, self.version, [request[0] for request in requests])

    def _request(self, group: Group, j: int) -> tuple:
        sample = group.samples[j]
        sample.segments += 1
        if sample.segments > 1:
            self.step_counts["resumed"] += 1
        # a seed per (run seed, step, prompt, sample, attempt, segment): hf_infer seeds a call by its first
        seed = ((self.settings.seed * 100003 + group.step) * 1009 + group.index) * 64 + j
        seed = (seed * 16 + group.attempt) * 16 + sample.segments
        request_id = f"{group.step}-{group.index}-{j}-{group.attempt}-{sample.segments}"
        sampling = {"max_new_tokens": self.max_new_tokens - len(sample.tokens), "seed": seed % 2**62}
        return request_id, sample.prompt_ids + sample.tokens, sampling

    def _check_timeouts(self) -> None:
        """A call older than actor_infer's rpc_timeout: its result() raises RoleTimeout naming role and method."""
        timeout = self.engine().rpc_timeout
        for call, *_ in list(self.in_flight.values()):
            if timeout is not None and time.monotonic() - call.started > timeout:
                call.result()

    def _collect(self, rank: int) -> None:
        call, batch, version, _ = self.in_flight[rank]
        results = call.result()  # a dead worker: WorkerDied, handed to the trainer
        finished = []
        with self.cond:
            del self.in_flight[rank]
            for (group, j, sample), result in zip(batch, results):
                if sample is not group.samples[j]:
                    continue  # the group was restarted while this request ran
                sample.tokens += result.token_ids
                sample.log_probs += result.log_probs
                sample.versions += [version] * len(result.token_ids)
                if result.finish_reason == "abort" and len(sample.tokens) < self.max_new_tokens:
                    self.step_counts["aborted"] += 1
                    self.pending.appendleft((group, j))  # resume first, on the new weights
                    continue
                sample.done = True
                if all(s.done for s in group.samples):
                    finished.append(group)
            for group in finished:
                group.scored = self.scorer.submit(self._score, group)
            self.cond.notify_all()

    # ---- the scorer thread -------------------------------------------------------------------------------------
    def _score(self, group: Group) -> DataProto:
        with self.cond:
            self.step_counts["overlapped"] += bool(self.in_flight)
        prompt = collate_prompts([group.row], self.settings.prompt_length, self.pad_token_id)
        prompt.non_tensor_batch["domain"] = np.array([group.row["domain"]], dtype=object)
        prompt.non_tensor_batch["uid"] = np.array([f"{group.step}-{group.index}"], dtype=object)
        batch = samples_to_batch(group.samples, prompt, self.max_new_tokens, self.pad_token_id)
        batch = self.finish_generation(batch, 0, self.n)
        return self.compute_rewards(batch)


def samples_to_batch(samples: list[Sample], prompt: DataProto, response_length: int, pad_token_id: int) -> DataProto:
    """A one-prompt batch of its samples, laid out as `generate` returns it (prompts left-padded, responses
    right-padded to response_length, response_mask over the generated tokens, rollout_log_probs)."""
    n = len(samples)
    responses = torch.full((n, response_length), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((n, response_length), dtype=torch.float32)
    log_probs = torch.zeros((n, response_length), dtype=torch.float32)
    for row, sample in enumerate(samples):
        length = len(sample.tokens)
        responses[row, :length] = torch.tensor(sample.tokens, dtype=torch.long)
        response_mask[row, :length] = 1.0
        log_probs[row, :length] = torch.tensor(sample.log_probs, dtype=torch.float32)
    tensors = rollout_tensors(
        prompt.batch["prompts"], prompt.batch["attention_mask"], responses, response_mask, log_probs, n
    )
    out = DataProto.from_dict(tensors=tensors)
    for key, values in prompt.non_tensor_batch.items():
        out.non_tensor_batch[key] = values.repeat(n)
    out.meta_info = dict(prompt.meta_info)
    return out
