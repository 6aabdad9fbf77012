"""device_mapping → placement. One placement-group bundle per device id; workers whose ids overlap
share a bundle (colocated), disjoint ids never do.

On GPU machines a bundle is one GPU; on CPU-only machines it is one unit of the custom resource
`roll_device` (a virtual device), so colocation behaves exactly as it would on GPUs.
"""

from dataclasses import dataclass

# Each worker takes a sliver of its device so any number of colocated roles fit on it.
WORKER_SHARE = 0.01


@dataclass(frozen=True)
class WorkerPlacement:
    role: str
    rank: int
    devices: tuple  # device ids owned by this worker (empty: a CPU-only worker, e.g. rewards)


def plan_role(role: str, device_mapping, num_gpus_per_worker: int, world_size: int) -> list[WorkerPlacement]:
    """Pure function (no Ray): which device ids each rank of a role gets."""
    if not device_mapping:
        return [WorkerPlacement(role, rank, ()) for rank in range(world_size)]
    if len(device_mapping) % num_gpus_per_worker:
        raise ValueError(
            f"{role}.device_mapping has {len(device_mapping)} ids, not a multiple of "
            f"{role}.num_gpus_per_worker={num_gpus_per_worker}"
        )
    k = num_gpus_per_worker
    return [
        WorkerPlacement(role, rank, tuple(device_mapping[rank * k : (rank + 1) * k]))
        for rank in range(len(device_mapping) // k)
    ]


def placement_plan(roles: dict) -> list[WorkerPlacement]:
    """roles: name → worker config (device_mapping, num_gpus_per_worker, world_size)."""
    return [
        p
        for name, cfg in roles.items()
        for p in plan_role(name, cfg.device_mapping, cfg.num_gpus_per_worker, cfg.world_size)
    ]


def format_plan(plan: list[WorkerPlacement], num_devices: int) -> str:
    """A table a person can read: device → roles on it, then CPU-only workers."""
    lines = [f"placement on {num_devices} devices:"]
    for device in range(num_devices):
        users = [f"{p.role}[{p.rank}]" for p in plan if device in p.devices]
        lines.append(f"  device {device:>3}: {', '.join(users) if users else '(idle)'}")
    cpu_only = [f"{p.role}[{p.rank}]" for p in plan if not p.devices]
    if cpu_only:
        lines.append(f"  cpu only  : {', '.join(cpu_only)}")
    shared = {}
    for p in plan:
        for d in p.devices:
            shared.setdefault(d, set()).add(p.role)
    groups = sorted({tuple(sorted(roles)) for roles in shared.values() if len(roles) > 1})
    lines.append("  colocated : " + ("; ".join(" + ".join(g) for g in groups) if groups else "none"))
    return "\n".join(lines)


class ResourceManager:
    """Owns the placement group; hands out Ray actor options for a worker's devices."""

    def __init__(self, num_nodes: int, num_gpus_per_node: int):
        import ray
        from ray.util.placement_group import placement_group

        from roll.distributed.ray_utils import VIRTUAL_DEVICE, has_gpus

        self.num_devices = num_nodes * num_gpus_per_node
        self.use_gpus = has_gpus()
        self.device_resource = "GPU" if self.use_gpus else VIRTUAL_DEVICE
        bundles = [{self.device_resource: 1}] * self.num_devices
        self.placement_group = placement_group(bundles, strategy="PACK")
        try:
            ray.get(self.placement_group.ready(), timeout=120)
        except ray.exceptions.GetTimeoutError:
            ray.util.remove_placement_group(self.placement_group)
            raise TimeoutError(
                f"could not reserve {self.num_devices} {self.device_resource} devices within 120 s (Ray has "
                f"{ray.available_resources().get(self.device_resource, 0)} free); is another pipeline still "
                f"holding them in this Ray session? Call its close() first"
            ) from None

    def shutdown(self) -> None:
        """Release the devices (call after the roles' workers are stopped)."""
        from ray.util.placement_group import remove_placement_group

        if self.placement_group is not None:
            remove_placement_group(self.placement_group)
            self.placement_group = None

    def actor_options(self, placement: WorkerPlacement) -> dict:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not placement.devices:
            return {"num_cpus": 0}
        bad = [d for d in placement.devices if not 0 <= d < self.num_devices]
        if bad:
            raise ValueError(
                f"{placement.role}.device_mapping uses device ids {bad}, but the pool has "
                f"{self.num_devices} devices (0..{self.num_devices - 1}); "
                f"raise num_nodes/num_gpus_per_node or change the mapping"
            )
        share = {"num_gpus": WORKER_SHARE} if self.use_gpus else {"resources": {self.device_resource: WORKER_SHARE}}
        # A Ray actor lives in one bundle: multi-device workers sit in their first device's bundle.
        strategy = PlacementGroupSchedulingStrategy(
            self.placement_group, placement_group_bundle_index=placement.devices[0]
        )
        return {"num_cpus": 0, "scheduling_strategy": strategy, **share}
