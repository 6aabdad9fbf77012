"""A role's workers as one object: every @register-ed method becomes a cluster-wide call."""

import numbers
import sys
import time

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import (
    CONCURRENCY_ATTR,
    DISPATCH_ATTR,
    THREADS_KEY,
    DataParallelLayout,
    Dispatch,
    collect_results,
    split_arguments,
)
from roll.distributed.resource_manager import plan_role
from roll.utils.errors import UserError

# Starting a worker process (imports torch, transformers) can take a while on a loaded machine; a role's
# `start_timeout` sets it.
ACTOR_START_TIMEOUT = 300.0


class RoleFailure(RuntimeError):
    """A role's worker died or a call to it timed out: the failures automatic recovery (max_failures)
    handles by restarting the roles. `role`, `method`, `rank` name the call."""

    def __init__(self, message: str, role: str, method: str, rank: int):
        super().__init__(message)
        self.role, self.method, self.rank = role, method, rank


class WorkerDied(RoleFailure):
    pass


class RoleTimeout(RoleFailure, TimeoutError):
    pass


class RoleRefused(UserError, RuntimeError):
    """A role's method raised one of roll's refusals (a UserError, e.g. a reward plugin's score that is not a
    number): the launcher prints its message alone; not a RoleFailure, since redoing the step fails the same way."""


class Cluster:
    def __init__(self, name: str, worker_cls, resource_manager, worker_config, *, seed: int, runtime_env=None):
        """`seed`: the pipeline's config.seed; worker `rank` seeds its RNGs with worker_seed(seed, rank).
        `runtime_env`: Ray's, for these workers (e.g. {"nsight": ...} to run them under Nsight Systems)."""
        self.name, self.worker_config = name, worker_config
        # seconds with a call outstanding (union of call intervals as the driver sees them): busy/idle metrics
        self.busy_seconds, self._busy_until = 0.0, 0.0
        # DataProto bytes the driver sent to this role's workers (Dispatch.DP_MP_COMPUTE shards, each once):
        # in all, and by the latest call
        self.sent_bytes, self.last_sent_bytes = 0, 0
        self._layout: DataParallelLayout | None = None  # asked once, after the strategies are initialised
        self.rpc_timeout = worker_config.rpc_timeout
        # intra-op threads the workers use for the calls that follow (None: as they are); set by the pipeline's
        # ThreadPlan (roll.pipeline.core.concurrency), sent in each DataProto argument's meta_info
        self.threads: int | None = None
        self.start_timeout = getattr(worker_config, "start_timeout", ACTOR_START_TIMEOUT)
        placements = plan_role(
            name, worker_config.device_mapping, worker_config.num_gpus_per_worker, worker_config.world_size
        )
        self.world_size = len(placements)
        # Concurrency groups let e.g. abort_request run while a request is generating; without any, Ray
        # runs one call at a time on the worker's main thread.
        groups = getattr(worker_cls, "concurrency_groups", None)
        self.concurrency_groups = dict(groups(worker_config)) if groups else {}
        remote = ray.remote(concurrency_groups=self.concurrency_groups) if self.concurrency_groups else ray.remote
        remote_cls = remote(ship_by_value(worker_cls))
        # Workers start in the background (several roles start at once); the first call waits for rank 0
        # to pick the torch.distributed rendezvous address and hands it to the other ranks.
        self.workers = [
            remote_cls.options(
                name=f"{name}-{placement.rank}-{id(self)}",
                **resource_manager.actor_options(placement),
                **({"runtime_env": runtime_env} if runtime_env else {}),
            ).remote(worker_config, placement.rank, self.world_size, placement.devices, seed=seed)
            for placement in placements
        ]
        self._master_ref = self.workers[0].get_master_address.remote()
        self._rendezvous_set = False
        for method_name in dir(worker_cls):
            mode = dispatch_mode(worker_cls, method_name)
            if mode is not None:
                group = _registered(worker_cls, method_name, CONCURRENCY_ATTR)
                group = group if group in self.concurrency_groups else None  # not enabled: the usual queue
                setattr(self, method_name, RemoteMethod(self, method_name, mode, group))

    def _count_busy(self, started: float, ended: float) -> None:
        """Adds the part of [started, ended] not counted yet (overlapping calls count once)."""
        self.busy_seconds += max(ended - max(started, self._busy_until), 0.0)
        self._busy_until = max(self._busy_until, ended)

    def shutdown(self) -> None:
        """Stop this role's workers (their devices' shares are returned to the placement group)."""
        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []

    def first_finished(self, calls: dict, timeout: float):
        """Of `calls` (key → this role's PendingCall to one worker), the key of one whose result is ready,
        waiting at most `timeout` s; None if none is by then (the request-level rollout's dispatcher)."""
        refs = {call.refs[0]: key for key, call in calls.items()}
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
        return refs[ready[0]] if ready else None

    def _set_rendezvous(self) -> None:
        """Ranks > 0 learn rank 0's address before any other call reaches them (calls are ordered)."""
        if self._rendezvous_set:
            return
        master = tuple(self._wait("get_master_address", [self._master_ref], timeout=self.start_timeout)[0])
        for worker in self.workers[1:]:
            worker.set_master_address.remote(*master)
        self._rendezvous_set = True

    def _submit(self, method: str, mode, args: tuple, kwargs: dict, group: str | None = None) -> "PendingCall":
        self._set_rendezvous()
        ranks, args = self._target_ranks(method, mode, args)
        args = tuple(with_threads(a, self.threads) for a in args)
        kwargs = {k: with_threads(v, self.threads) for k, v in kwargs.items()}
        layout = self.data_parallel_layout() if mode is Dispatch.DP_MP_COMPUTE else None
        per_worker = split_arguments(mode, len(ranks), args, kwargs, layout)
        if layout is not None:
            per_worker = self._put_shards_once(per_worker)
        refs = []
        for rank, (a, kw) in zip(ranks, per_worker):
            remote = getattr(self.workers[rank], method)
            if group is not None:
                remote = remote.options(concurrency_group=group)
            refs.append(remote.remote(*a, **kw))
        return PendingCall(self, method, mode, refs, time.monotonic(), ranks, layout)

    def data_parallel_layout(self) -> DataParallelLayout:
        """Each worker's data-parallel rank and whether its result is collected (Worker.data_parallel_info),
        asked at the first data-parallel call (after `initialize`, which comes first on every worker) and
        kept: a role's layout does not change while its workers live."""
        if self._layout is None:
            refs = [worker.data_parallel_info.remote() for worker in self.workers]
            reports = self._wait("data_parallel_info", refs)
            self._layout = DataParallelLayout.from_reports(reports, self.name)
        return self._layout

    def _put_shards_once(self, per_worker: list[tuple[tuple, dict]]) -> list[tuple[tuple, dict]]:
        """DataProto shards into Ray's object store once each (compacted: a row slice would carry the whole
        batch), the ranks sharing a shard (a data-parallel group) getting the same reference; counts the
        bytes sent."""
        refs: dict[int, tuple] = {}  # id(shard) → (shard, its object ref); the shard is kept alive here

        def once(value):
            if not isinstance(value, DataProto):
                return value
            if id(value) not in refs:
                shard = value.compact()
                refs[id(value)] = (value, ray.put(shard))
                self.last_sent_bytes += shard.nbytes()
            return refs[id(value)][1]

        self.last_sent_bytes = 0
        out = [(tuple(once(a) for a in args), {k: once(v) for k, v in kwargs.items()}) for args, kwargs in per_worker]
        self.sent_bytes += self.last_sent_bytes
        return out

    def _target_ranks(self, method: str, mode, args: tuple) -> tuple[list[int], tuple]:
        """The ranks a call goes to, and its arguments without the target rank (Dispatch.ONE_RANK)."""
        if mode is Dispatch.ONE_RANK:
            rank = args[0] if args else None
            if not isinstance(rank, numbers.Integral) or isinstance(rank, bool) or not 0 <= rank < self.world_size:
                raise ValueError(
                    f"{self.name}.{method}: the first argument is the rank of the worker to call "
                    f"(0..{self.world_size - 1}), got {rank!r}"
                )
            return [int(rank)], args[1:]
        if mode is Dispatch.RANK0:
            return [0], args
        return list(range(self.world_size)), args

    def _wait(
        self,
        method: str,
        refs: list,
        timeout: float | None = -1.0,
        started: float | None = None,
        ranks: list[int] | None = None,
    ) -> list:
        timeout = self.rpc_timeout if timeout == -1.0 else timeout
        started = started or time.monotonic()
        deadline = None if timeout is None else started + timeout
        results = []
        for rank, ref in zip(ranks or range(len(refs)), refs):
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                results.append(ray.get(ref, timeout=remaining))
            except GetTimeoutError:
                key = "start_timeout" if method == "get_master_address" else "rpc_timeout"
                raise RoleTimeout(
                    f"{self.name}.{method} did not answer within {timeout} s (rank {rank} of {self.world_size}; "
                    f"gave up after {time.monotonic() - started:.1f} s); raise {self.name}.{key} if the work is "
                    f"legitimately slow",
                    self.name,
                    method,
                    rank,
                ) from None
            except RayTaskError as error:
                if isinstance(error.cause, UserError):  # a refusal with its own message: it alone, on one line
                    raise RoleRefused(
                        f"{self.name}.{method} failed on rank {rank} of {self.world_size}: {error.cause}"
                    ) from None
                raise RuntimeError(
                    f"{self.name}.{method} failed on rank {rank} of {self.world_size}:\n{error}"
                ) from None
            except RayActorError as error:
                raise WorkerDied(
                    f"{self.name}.{method}: worker rank {rank} died ({error})", self.name, method, rank
                ) from None
        return results


def dispatch_mode(worker_cls, method_name: str):
    """The method's @register mode; an override without the decorator (a user's reward worker
    redefining `initialize`) keeps the mode of the method it overrides."""
    return _registered(worker_cls, method_name, DISPATCH_ATTR)


def _registered(worker_cls, method_name: str, attr: str):
    """What @register set on the nearest definition of the method that has the decorator."""
    for klass in worker_cls.__mro__:
        if method_name in vars(klass) and hasattr(vars(klass)[method_name], DISPATCH_ATTR):
            return getattr(vars(klass)[method_name], attr, None)
    return None


class RemoteMethod:
    """`cluster.method(...)` blocks (with the role's rpc_timeout); `cluster.method.submit(...)` returns a
    PendingCall, so several roles can work at once (e.g. every role initialising in parallel)."""

    def __init__(self, cluster: Cluster, name: str, mode, group: str | None = None):
        self.cluster, self.name, self.mode, self.group = cluster, name, mode, group

    def __call__(self, *args, **kwargs):
        return self.submit(*args, **kwargs).result()

    def submit(self, *args, **kwargs) -> "PendingCall":
        return self.cluster._submit(self.name, self.mode, args, kwargs, self.group)


class PendingCall:
    def __init__(self, cluster: Cluster, method: str, mode, refs: list, started: float, ranks: list[int], layout=None):
        self.cluster, self.method, self.mode, self.refs, self.started = cluster, method, mode, refs, started
        self.ranks, self.layout = ranks, layout

    def result(self):
        """The call's result; the role's rpc_timeout counts from submission."""
        results = self.cluster._wait(self.method, self.refs, started=self.started, ranks=self.ranks)
        self.cluster._count_busy(self.started, time.monotonic())
        return collect_results(self.mode, results, self.layout)


def with_threads(value, threads: int | None):
    """A DataProto argument as a copy whose meta_info carries `num_threads` = `threads`, or none (a value a
    worker copied into its output must not reach a role with threads of its own); the caller's is left as it is."""
    if not isinstance(value, DataProto) or (threads is None and THREADS_KEY not in value.meta_info):
        return value
    meta = {k: v for k, v in value.meta_info.items() if k != THREADS_KEY}
    if threads is not None:
        meta[THREADS_KEY] = threads
    return DataProto(dict(value.batch), dict(value.non_tensor_batch), meta)


def ship_by_value(worker_cls):
    """A user's class (a custom reward worker in `my_rewards.py`, an environment) travels to the workers by value,
    so they need not find its module on their own PYTHONPATH; roll's and installed packages' classes go
    by reference as usual. Modules the user's module imports must still be importable by the workers."""
    module = sys.modules.get(worker_cls.__module__)
    top_level = worker_cls.__module__.partition(".")[0]
    if module is not None and top_level != "roll" and not _is_installed(module):
        ray.cloudpickle.register_pickle_by_value(module)
    return worker_cls


def _is_installed(module) -> bool:
    path = getattr(module, "__file__", None) or ""
    return "site-packages" in path or "dist-packages" in path
