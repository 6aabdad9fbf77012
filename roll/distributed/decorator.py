"""`@register(dispatch_mode=...)`: how a Cluster fans a call out to its workers and gathers results."""

import functools
from dataclasses import dataclass
from enum import Enum

from roll.distributed.data_proto import DataProto


class Dispatch(Enum):
    ONE_TO_ALL = "one_to_all"  # same arguments to every worker; a list of results
    # DataProto arguments split over the data-parallel groups (every rank of a group gets its group's shard);
    # results of the one collecting rank per group, in data-parallel order (DataProto ones concatenated)
    DP_MP_COMPUTE = "dp_mp_compute"
    RANK0 = "rank0"  # only rank 0 runs; its result
    ONE_RANK = "one_rank"  # cluster.method(rank, *args): only worker `rank` runs (without `rank`); its result


DISPATCH_ATTR = "_roll_dispatch_mode"
CONCURRENCY_ATTR = "_roll_concurrency_group"
# Concurrency groups (Ray's) a worker may run methods in, beside its default one-call-at-a-time queue.
# "control": quick, thread-safe calls that must reach a worker while a long call runs there (abort_request).
CONCURRENCY_GROUPS = {"control": 2}
# meta_info key of a DataProto argument: the intra-op threads the worker uses from this call on (Cluster.threads)
THREADS_KEY = "num_threads"


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
    """While a worker is profiled (Worker.start_profile), each call is a named range <role>.<method>. A
    DataProto argument's meta_info `num_threads` sets the worker's intra-op threads first."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        _use_threads(args, kwargs)
        profiler = getattr(self, "_profiler", None)
        if profiler is None:
            return method(self, *args, **kwargs)
        with profiler.phase(method.__name__):
            return method(self, *args, **kwargs)

    return call


def _use_threads(args: tuple, kwargs: dict) -> None:
    for value in (*args, *kwargs.values()):
        threads = value.meta_info.get(THREADS_KEY) if isinstance(value, DataProto) else None
        if threads:
            import torch

            if torch.get_num_threads() != threads:
                torch.set_num_threads(int(threads))
            return


@dataclass(frozen=True)
class DataParallelLayout:
    """Per worker rank: its data-parallel rank and whether its result is the one to collect (one collecting
    rank per data-parallel group: for Megatron tensor rank 0 of the last pipeline stage)."""

    dp_ranks: tuple[int, ...]
    collect: tuple[bool, ...]
    dp_size: int

    @classmethod
    def plain(cls, world_size: int) -> "DataParallelLayout":
        """No model parallelism: every rank is its own data-parallel group."""
        return cls(tuple(range(world_size)), (True,) * world_size, world_size)

    @classmethod
    def from_reports(cls, reports: list[dict], where: str) -> "DataParallelLayout":
        """From each rank's {"dp_rank", "dp_size", "collect"} (Worker.data_parallel_info), checked: one dp_size,
        every data-parallel rank present with exactly one collecting rank."""
        sizes = {int(report["dp_size"]) for report in reports}
        if len(sizes) != 1:
            raise ValueError(f"{where}: ranks disagree on the data-parallel size: {reports}")
        size = sizes.pop()
        collectors = sorted(int(r["dp_rank"]) for r in reports if r["collect"])
        ranks = {int(r["dp_rank"]) for r in reports}
        if ranks != set(range(size)) or collectors != list(range(size)):
            raise ValueError(
                f"{where}: each data-parallel rank 0..{size - 1} needs ranks and exactly one collecting rank; "
                f"got {reports}"
            )
        return cls(tuple(int(r["dp_rank"]) for r in reports), tuple(bool(r["collect"]) for r in reports), size)


def split_arguments(
    mode: Dispatch, world_size: int, args: tuple, kwargs: dict, layout: DataParallelLayout | None = None
) -> list[tuple[tuple, dict]]:
    """Per-worker (args, kwargs) for the `world_size` workers called; only DP_MP_COMPUTE splits, and only
    DataProto arguments: into `layout.dp_size` shards (default: one per rank), the ranks of one data-parallel
    group getting the same shard object (the Cluster sends each shard once)."""
    if mode in (Dispatch.RANK0, Dispatch.ONE_RANK):
        return [(args, kwargs)]
    if mode is Dispatch.ONE_TO_ALL:
        return [(args, kwargs)] * world_size
    layout = layout or DataParallelLayout.plain(world_size)
    size = layout.dp_size
    split_args = [a.chunk(size) if isinstance(a, DataProto) else [a] * size for a in args]
    split_kwargs = {k: v.chunk(size) if isinstance(v, DataProto) else [v] * size for k, v in kwargs.items()}
    return [(tuple(a[dp] for a in split_args), {k: v[dp] for k, v in split_kwargs.items()}) for dp in layout.dp_ranks]


def collect_results(mode: Dispatch, results: list, layout: DataParallelLayout | None = None):
    if mode in (Dispatch.RANK0, Dispatch.ONE_RANK):
        return results[0]
    if mode is not Dispatch.DP_MP_COMPUTE:
        return results
    if layout is not None:  # the collecting rank of each data-parallel group, in data-parallel order
        kept = [(dp, r) for dp, r, keep in zip(layout.dp_ranks, results, layout.collect) if keep]
        results = [result for _, result in sorted(kept, key=lambda pair: pair[0])]
    if results and all(isinstance(r, DataProto) for r in results):
        return DataProto.concat(results)
    return results
