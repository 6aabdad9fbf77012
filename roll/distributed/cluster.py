"""A role's workers as one object: every @register-ed method becomes a cluster-wide call."""

import sys
import time

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from roll.distributed.decorator import DISPATCH_ATTR, collect_results, split_arguments
from roll.distributed.resource_manager import plan_role

# Starting a worker process (imports torch, transformers) can take a while on a loaded machine.
ACTOR_START_TIMEOUT = 300.0


class Cluster:
    def __init__(self, name: str, worker_cls, resource_manager, worker_config, *, seed: int):
        """`seed`: the pipeline's config.seed; worker `rank` seeds its RNGs with worker_seed(seed, rank)."""
        self.name, self.worker_config = name, worker_config
        self.rpc_timeout = worker_config.rpc_timeout
        placements = plan_role(
            name, worker_config.device_mapping, worker_config.num_gpus_per_worker, worker_config.world_size
        )
        self.world_size = len(placements)
        remote_cls = ray.remote(ship_by_value(worker_cls))
        # Workers start in the background (several roles start at once); the first call waits for rank 0
        # to pick the torch.distributed rendezvous address and hands it to the other ranks.
        self.workers = [
            remote_cls.options(
                name=f"{name}-{placement.rank}-{id(self)}", **resource_manager.actor_options(placement)
            ).remote(worker_config, placement.rank, self.world_size, placement.devices, seed=seed)
            for placement in placements
        ]
        self._master_ref = self.workers[0].get_master_address.remote()
        self._rendezvous_set = False
        for method_name in dir(worker_cls):
            mode = dispatch_mode(worker_cls, method_name)
            if mode is not None:
                setattr(self, method_name, RemoteMethod(self, method_name, mode))

    def shutdown(self) -> None:
        """Stop this role's workers (their devices' shares are returned to the placement group)."""
        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []

    def _set_rendezvous(self) -> None:
        """Ranks > 0 learn rank 0's address before any other call reaches them (calls are ordered)."""
        if self._rendezvous_set:
            return
        master = tuple(self._wait("get_master_address", [self._master_ref], timeout=ACTOR_START_TIMEOUT)[0])
        for worker in self.workers[1:]:
            worker.set_master_address.remote(*master)
        self._rendezvous_set = True

    def _submit(self, method: str, mode, args: tuple, kwargs: dict) -> "PendingCall":
        self._set_rendezvous()
        per_worker = split_arguments(mode, self.world_size, args, kwargs)
        refs = [getattr(worker, method).remote(*a, **kw) for worker, (a, kw) in zip(self.workers, per_worker)]
        return PendingCall(self, method, mode, refs, time.monotonic())

    def _wait(self, method: str, refs: list, timeout: float | None = -1.0, started: float | None = None) -> list:
        timeout = self.rpc_timeout if timeout == -1.0 else timeout
        deadline = None if timeout is None else (started or time.monotonic()) + timeout
        results = []
        for rank, ref in enumerate(refs):
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                results.append(ray.get(ref, timeout=remaining))
            except GetTimeoutError:
                raise TimeoutError(
                    f"{self.name}.{method} did not answer within {timeout} s "
                    f"(rank {rank} of {len(refs)}); raise rpc_timeout if the work is legitimately slow"
                ) from None
            except RayTaskError as error:
                raise RuntimeError(f"{self.name}.{method} failed on rank {rank} of {len(refs)}:\n{error}") from None
            except RayActorError as error:
                raise RuntimeError(f"{self.name}.{method}: worker rank {rank} died ({error})") from None
        return results


def dispatch_mode(worker_cls, method_name: str):
    """The method's @register mode; an override without the decorator (a user's reward worker
    redefining `initialize`) keeps the mode of the method it overrides."""
    for klass in worker_cls.__mro__:
        if method_name in vars(klass):
            mode = getattr(vars(klass)[method_name], DISPATCH_ATTR, None)
            if mode is not None:
                return mode
    return None


class RemoteMethod:
    """`cluster.method(...)` blocks (with the role's rpc_timeout); `cluster.method.submit(...)` returns a
    PendingCall, so several roles can work at once (e.g. every role initialising in parallel)."""

    def __init__(self, cluster: Cluster, name: str, mode):
        self.cluster, self.name, self.mode = cluster, name, mode

    def __call__(self, *args, **kwargs):
        return self.submit(*args, **kwargs).result()

    def submit(self, *args, **kwargs) -> "PendingCall":
        return self.cluster._submit(self.name, self.mode, args, kwargs)


class PendingCall:
    def __init__(self, cluster: Cluster, method: str, mode, refs: list, started: float):
        self.cluster, self.method, self.mode, self.refs, self.started = cluster, method, mode, refs, started

    def result(self):
        """The call's result; the role's rpc_timeout counts from submission."""
        return collect_results(self.mode, self.cluster._wait(self.method, self.refs, started=self.started))


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
