"""`@register(dispatch_mode=...)`: how a Cluster fans a call out to its workers and gathers results."""

from enum import Enum

from roll.distributed.data_proto import DataProto


class Dispatch(Enum):
    ONE_TO_ALL = "one_to_all"  # same arguments to every worker; a list of results
    DP_MP_COMPUTE = "dp_mp_compute"  # DataProto arguments split by rank; DataProto results concatenated
    RANK0 = "rank0"  # only rank 0 runs; its result


DISPATCH_ATTR = "_roll_dispatch_mode"


def register(dispatch_mode: Dispatch = Dispatch.ONE_TO_ALL):
    if not isinstance(dispatch_mode, Dispatch):
        raise TypeError(f"register: dispatch_mode must be one of {[m.name for m in Dispatch]}, got {dispatch_mode!r}")

    def mark(method):
        setattr(method, DISPATCH_ATTR, dispatch_mode)
        return method

    return mark


def split_arguments(mode: Dispatch, world_size: int, args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """Per-worker (args, kwargs); only DP_MP_COMPUTE splits, and only DataProto arguments."""
    if mode is Dispatch.RANK0:
        return [(args, kwargs)]
    if mode is Dispatch.ONE_TO_ALL:
        return [(args, kwargs)] * world_size
    split_args = [a.chunk(world_size) if isinstance(a, DataProto) else [a] * world_size for a in args]
    split_kwargs = {k: v.chunk(world_size) if isinstance(v, DataProto) else [v] * world_size for k, v in kwargs.items()}
    return [(tuple(a[r] for a in split_args), {k: v[r] for k, v in split_kwargs.items()}) for r in range(world_size)]


def collect_results(mode: Dispatch, results: list):
    if mode is Dispatch.RANK0:
        return results[0]
    if mode is Dispatch.DP_MP_COMPUTE and results and all(isinstance(r, DataProto) for r in results):
        return DataProto.concat(results)
    return results
