"""Base class of every role's Ray actor: rank, world size, the torch.distributed environment and the seed."""

import os
import socket

from roll.distributed.decorator import Dispatch, register
from roll.distributed.ray_utils import enter_driver_cwd, node_ip
from roll.utils.logging import get_logger
from roll.utils.seeding import set_seed, worker_seed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


class Worker:
    def __init__(
        self,
        worker_config,
        rank: int,
        world_size: int,
        devices: tuple = (),
        master_addr: str | None = None,
        master_port: int | None = None,
        seed: int | None = None,
    ):
        # Python, numpy and torch RNGs from the pipeline's seed and the rank (a critic's value head, dropout,
        # any sampling in a user's worker), before anything draws from them; None (a worker built outside
        # a Cluster) leaves the process defaults.
        self.seed = seed
        if seed is not None:
            set_seed(worker_seed(seed, rank))
        self.worker_config = worker_config
        self.worker_name = worker_config.name
        self.rank, self.world_size, self.devices = rank, world_size, tuple(devices)
        # Rank 0 chooses the rendezvous address; the Cluster hands it to the other ranks
        # (set_master_address) before their first other call.
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK="0")
        if master_addr is None and rank == 0:  # the node's address, reachable from other nodes
            master_addr, master_port = node_ip(), _free_port()
        self.master_addr, self.master_port = None, None
        if master_addr is not None:
            self.set_master_address(master_addr, master_port)
        self.logger = get_logger(f"{self.worker_name}[{rank}]")
        enter_driver_cwd(self.logger)  # relative config paths mean what they mean to the driver

    @classmethod
    def concurrency_groups(cls, worker_config) -> dict:
        """Ray concurrency groups (names from decorator.CONCURRENCY_GROUPS → calls at once) this role's
        workers get. None by default: one call at a time, in order, on the worker's main thread. With a
        group, Ray runs the default queue on a thread of its own (still one call at a time, in order)."""
        return {}

    _profiler = None  # a roll.utils.profiler.WorkerProfiler during a profiled step

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def start_profile(self, step: int, settings: dict) -> bool:
        """Begin profiling 1-based `step` if this rank is selected (settings: roll.configs.profiler.role_profile);
        returns whether it is."""
        from roll.utils.profiler import WorkerProfiler

        if not (settings["all_ranks"] or self.rank in settings["ranks"]):
            return False
        self._profiler = WorkerProfiler(self.worker_name, self.rank, step, settings)
        return True

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def stop_profile(self) -> list[str]:
        """End the profiling session (if any); the files it wrote."""
        profiler, self._profiler = self._profiler, None
        return profiler.stop() if profiler is not None else []

    def data_parallel_info(self) -> dict:
        """{"dp_rank", "dp_size", "collect"}: which data-parallel shard this rank works on and whether its
        result is its group's (Dispatch.DP_MP_COMPUTE). The strategy's once initialised (model-parallel ranks
        share a shard); without one, every rank is its own group."""
        strategy = getattr(self, "strategy", None)
        if strategy is not None and hasattr(strategy, "data_parallel_info"):
            return strategy.data_parallel_info()
        return {"dp_rank": self.rank, "dp_size": self.world_size, "collect": True}

    def get_master_address(self) -> tuple[str, int]:
        return self.master_addr, self.master_port

    def set_master_address(self, master_addr: str, master_port: int) -> None:
        self.master_addr, self.master_port = master_addr, int(master_port)
        os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))

    def describe_placement(self) -> dict:
        """Where Ray put this worker (used by tests and the placement log)."""
        import ray

        context = ray.get_runtime_context()
        return {
            "role": self.worker_name,
            "rank": self.rank,
            "devices": self.devices,
            "node_id": context.get_node_id(),
            "node_ip": node_ip(),
            "gpu_ids": ray.get_gpu_ids(),
            "resources": context.get_assigned_resources(),
            "pid": os.getpid(),
            # the cores this process may run on: the node's share the pipeline's ThreadPlan divides
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
        }
