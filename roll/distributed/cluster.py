"""A role's workers as one object: every @register-ed method becomes a cluster-wide call."""
import functools
import time

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from roll.distributed.decorator import DISPATCH_ATTR, collect_results, split_arguments
from roll.distributed.resource_manager import plan_role

# Starting a worker process (imports torch, transformers) can take a while on a loaded machine.
ACTOR_START_TIMEOUT = 300.0


class Cluster:
    def __init__(self, name: str, worker_cls, resource_manager, worker_config):
        self.name, self.worker_config = name, worker_config
        self.rpc_timeout = worker_config.rpc_timeout
        placements = plan_role(name, worker_config.device_mapping, worker_config.num_gpus_per_worker,
                               worker_config.world_size)
        self.world_size = len(placements)
        remote_cls = ray.remote(worker_cls)
        self.workers = []
        master = (None, None)
        for placement in placements:
            options = resource_manager.actor_options(placement)
            actor = remote_cls.options(name=f"{name}-{placement.rank}-{id(self)}", **options).remote(
                worker_config, placement.rank, self.world_size, placement.devices, *master)
            self.workers.append(actor)
            if placement.rank == 0:
                ref = actor.get_master_address.remote()
                master = tuple(self._wait("get_master_address", [ref], timeout=ACTOR_START_TIMEOUT)[0])
        for method_name in dir(worker_cls):
            mode = getattr(getattr(worker_cls, method_name, None), DISPATCH_ATTR, None)
            if mode is not None:
                setattr(self, method_name, functools.partial(self._call, method_name, mode))

    def _call(self, method: str, mode, *args, **kwargs):
        per_worker = split_arguments(mode, self.world_size, args, kwargs)
        refs = [getattr(worker, method).remote(*a, **kw) for worker, (a, kw) in zip(self.workers, per_worker)]
        return collect_results(mode, self._wait(method, refs))

    def _wait(self, method: str, refs: list, timeout: float | None = -1.0) -> list:
        timeout = self.rpc_timeout if timeout == -1.0 else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        results = []
        for rank, ref in enumerate(refs):
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                results.append(ray.get(ref, timeout=remaining))
            except GetTimeoutError:
                raise TimeoutError(
                    f"{self.name}.{method} did not answer within {timeout} s "
                    f"(rank {rank} of {len(refs)}); raise rpc_timeout if the work is legitimately slow") from None
            except RayTaskError as error:
                raise RuntimeError(f"{self.name}.{method} failed on rank {rank} of {len(refs)}:\n{error}") from None
            except RayActorError as error:
                raise RuntimeError(f"{self.name}.{method}: worker rank {rank} died ({error})") from None
        return results
