"""`@register(dispatch_mode=...)`: how a Cluster fans a call out to its workers and gathers results."""

import functools
from enum import Enum

from roll.distributed.data_proto import DataProto


class Dispatch(Enum):
    ONE_TO_ALL = "one_to_all"  # same arguments to every worker; a list of results
    DP_MP_COMPUTE = "dp_mp_compute"  # DataProto arguments split by rank; DataProto results concatenated
    RANK0 = "rank0"  # only rank 0 runs; its result
    ONE_RANK = "one_rank"  # cluster.method(rank, *args): only worker `rank` runs (without `rank`); its result


DISPATCH_ATTR = "_roll_dispatch_mode"
CONCURRENCY_ATTR = "_roll_concurrency_group"
# Concurrency groups (Ray's) a worker may run methods in, beside its default one-call-at-a-time queue.
# "control": quick, thread-safe calls that must reach a worker while a long call runs there (abort_request).
CONCURRENCY_GROUPS = {"control": 2}


def register(dispatch_mode: Dispatch = Dispatch.ONE_TO_ALL, concurrency_group: str | None = None):
    """`concurrency_group` runs the method beside the worker's other calls instead of after them, where the
    worker class enables that group for the role (Worker.concurrency_groups); elsewhere it queues as usual."""
    if not isinstance(dispatch_mode, Dispatch):
        raise TypeError(f"register: dispatch_mode must be one of {[m.name for m in Dispatch]}, got {dispatch_mode!r}")
    if concurrency_group is not None and concurrency_group not in CONCURRENCY_GROUPS:
        raise ValueError(
            f"register: concurrency_group {concurrency_group!r} is not one of {sorted(CONCURRENCY_GROUPS)}"
        )

    def mark(method):
        call = method if method.__name__ in ("start_profile", "stop_profile") else _profiled(method)
        setattr(call, DISPATCH_ATTR, dispatch_mode)
        setattr(call, CONCURRENCY_ATTR, concurrency_group)
        return call

    return mark


def _profiled(method):
    """While a worker is profiled (Worker.start_profile), each call is a named range <role>.<method>."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        profiler = getattr(self, "_profiler", None)
        if profiler is None:
            return method(self, *args, **kwargs)
        with profiler.phase(method.__name__):
            return method(self, *args, **kwargs)

    return call


def split_arguments(mode: Dispatch, world_size: int, args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """Per-worker (args, kwargs) for the `world_size` workers called; only DP_MP_COMPUTE splits, and only
    DataProto arguments."""
    if mode in (Dispatch.RANK0, Dispatch.ONE_RANK):
        return [(args, kwargs)]
    if mode is Dispatch.ONE_TO_ALL:
        return [(args, kwargs)] * world_size
    split_args = [a.chunk(world_size) if isinstance(a, DataProto) else [a] * world_size for a in args]
    split_kwargs = {k: v.chunk(world_size) if isinstance(v, DataProto) else [v] * world_size for k, v in kwargs.items()}
    return [(tuple(a[r] for a in split_args), {k: v[r] for k, v in split_kwargs.items()}) for r in range(world_size)]


def collect_results(mode: Dispatch, results: list):
    if mode in (Dispatch.RANK0, Dispatch.ONE_RANK):
        return results[0]
    if mode is Dispatch.DP_MP_COMPUTE and results and all(isinstance(r, DataProto) for r in results):
        return DataProto.concat(results)
    return results
