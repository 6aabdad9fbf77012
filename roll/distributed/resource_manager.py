"""device_mapping → placement. One placement-group bundle per device id; workers whose ids overlap
share a bundle (colocated), disjoint ids never do.

On GPU machines a bundle is one GPU; on CPU-only machines it is one unit of the custom resource
`roll_device` (a virtual device), so colocation behaves exactly as it would on GPUs. Device id d is on
node d // num_gpus_per_node (ROLL's numbering; nodes ordered by roll.distributed.ray_utils.device_nodes).
"""

from dataclasses import dataclass

from roll.utils.logging import get_logger

logger = get_logger("roll.ray")

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


def format_plan(plan: list[WorkerPlacement], num_devices: int, num_gpus_per_node: int | None = None) -> str:
    """A table a person can read: device → roles on it, then CPU-only workers (and, on several nodes, which
    device ids each node holds)."""
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
    per_node = num_gpus_per_node or num_devices
    if per_node < num_devices:
        spans = [f"node {n} = devices {n * per_node}-{(n + 1) * per_node - 1}" for n in range(num_devices // per_node)]
        lines.append(f"  nodes     : {', '.join(spans)} (node 0: the driver's node if it has devices, then by IP)")
    return "\n".join(lines)


class ResourceManager:
    """Owns the placement groups — one per node, its bundles pinned to that node — and hands out Ray actor
    options for a worker's devices.

    Device id d is bundle `d % num_gpus_per_node` of node `d // num_gpus_per_node`'s group. Each group is
    STRICT_PACK with every bundle's label selector naming the node (`ray.io/node-id`), so a role's ranks land
    on the node device_mapping says and colocated roles share a node's device (its bundle). A single
    PACK group over all devices would be free to scatter bundles across nodes in any order.
    """

    def __init__(self, num_nodes: int, num_gpus_per_node: int, timeout: float = 120.0):
        import ray
        from ray.util.placement_group import placement_group

        from roll.distributed.ray_utils import NODE_ID_LABEL, device_nodes, device_resource, free_devices

        self.num_nodes, self.num_gpus_per_node = num_nodes, num_gpus_per_node
        self.num_devices = num_nodes * num_gpus_per_node
        self.device_resource = device_resource()
        self.use_gpus = self.device_resource == "GPU"
        # ClusterDevicesError before reserving anything; idle nodes first, so a second pipeline on a shared
        # cluster does not queue behind the first while other nodes' devices sit idle
        self.nodes = device_nodes(num_nodes, num_gpus_per_node, prefer_free=True)
        free = free_devices(self.device_resource)
        busy = [f"{node} has {free.get(node.node_id, 0):g} of {num_gpus_per_node} free" for node in self.nodes]
        busy = [line for node, line in zip(self.nodes, busy) if free.get(node.node_id, 0) < num_gpus_per_node]
        self.placement_groups = [
            placement_group(
                [{self.device_resource: 1}] * num_gpus_per_node,
                strategy="STRICT_PACK",
                bundle_label_selector=[{NODE_ID_LABEL: node.node_id}] * num_gpus_per_node,
            )
            for node in self.nodes
        ]
        try:
            self._wait_ready(busy, timeout)
        except ray.exceptions.GetTimeoutError:
            self.shutdown()
            free = ray.available_resources().get(self.device_resource, 0)
            raise TimeoutError(
                f"could not reserve {num_gpus_per_node} {self.device_resource} on each of "
                f"{', '.join(map(str, self.nodes))} within {timeout:g} s (placement_timeout; Ray has {free:g} free in "
                f"all); is another pipeline or job still holding them? In this process, call its close() first"
            ) from None

    def _wait_ready(self, busy: list[str], timeout: float, every: float = 30.0) -> None:
        """Waits for the placement groups, saying what it waits for (other holders' devices) when the
        devices are not free, and again every `every` seconds."""
        import time

        import ray

        refs = [group.ready() for group in self.placement_groups]
        deadline = time.monotonic() + timeout
        if busy:
            logger.warning(
                "waiting for devices (up to placement_timeout=%g s): %d node(s) with %d free %s each are needed, "
                "and %s; another pipeline or job holds them, and this run starts when they are released",
                timeout,
                self.num_nodes,
                self.num_gpus_per_node,
                self.device_resource,
                "; ".join(busy),
            )
        while True:
            left = deadline - time.monotonic()
            try:
                ray.get(refs, timeout=max(0.0, min(every, left)))
                if busy:
                    logger.info("devices reserved on %s; starting", ", ".join(map(str, self.nodes)))
                return
            except ray.exceptions.GetTimeoutError:
                if time.monotonic() >= deadline:
                    raise
                busy = busy or ["they were free a moment ago: another run reserved them first"]
                logger.warning(
                    "still waiting for devices on %s (%.0f s left of placement_timeout): %s",
                    ", ".join(map(str, self.nodes)),
                    deadline - time.monotonic(),
                    "; ".join(busy),
                )

    @property
    def placement_group(self):
        """Node 0's placement group (on one node: the only one)."""
        return self.placement_groups[0] if self.placement_groups else None

    def node_of(self, device: int):
        """The DeviceNode that holds device id `device`."""
        return self.nodes[device // self.num_gpus_per_node]

    def shutdown(self) -> None:
        """Release the devices (call after the roles' workers are stopped)."""
        from ray.util.placement_group import remove_placement_group

        for group in getattr(self, "placement_groups", []):
            remove_placement_group(group)
        self.placement_groups = []

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
        nodes = sorted({d // self.num_gpus_per_node for d in placement.devices})
        if len(nodes) > 1:
            raise ValueError(
                f"{placement.role} rank {placement.rank} has devices {list(placement.devices)} on nodes {nodes} "
                f"(num_gpus_per_node={self.num_gpus_per_node}); one worker's devices must be on one node"
            )
        share = {"num_gpus": WORKER_SHARE} if self.use_gpus else {"resources": {self.device_resource: WORKER_SHARE}}
        # A Ray actor lives in one bundle: multi-device workers sit in their first device's bundle.
        first = placement.devices[0]
        strategy = PlacementGroupSchedulingStrategy(
            self.placement_groups[first // self.num_gpus_per_node],
            placement_group_bundle_index=first % self.num_gpus_per_node,
        )
        return {"num_cpus": 0, "scheduling_strategy": strategy, **share}


def describe_workers(clusters: dict, timeout: float = 300.0) -> list[dict]:
    """Every worker's describe_placement() (role, rank, devices, node id/IP, GPU ids, pid), in role order;
    waits for the workers to start. A worker that failed to start is named with its role and rank."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    pending = [
        (name, rank, w.describe_placement.remote()) for name, c in clusters.items() for rank, w in enumerate(c.workers)
    ]
    rows = []
    for name, rank, ref in pending:
        try:
            rows.append(ray.get(ref, timeout=timeout))
        except GetTimeoutError:
            raise TimeoutError(f"{name} rank {rank} did not start within {timeout:g} s") from None
        except RayActorError as error:
            raise RuntimeError(f"{name} rank {rank} did not start: {error}") from None
    return rows


def check_placements(rows: list[dict], resource_manager: ResourceManager) -> str:
    """Raises if a device worker is not on the node its device ids say; returns a table for the log:
    one line per worker with the node (IP, id) and the device it landed on."""
    lines = [f"workers on {len(resource_manager.nodes)} node(s): {', '.join(map(str, resource_manager.nodes))}"]
    wrong = []
    for row in rows:
        where = f"{row['node_ip']} (id {row['node_id'][:8]})"
        name = f"{row['role']}[{row['rank']}]"
        if not row["devices"]:
            lines.append(f"  {name:<24} cpu only          -> {where}, pid {row['pid']}")
            continue
        node = resource_manager.node_of(row["devices"][0])
        gpus = f", GPU ids {row['gpu_ids']}" if row.get("gpu_ids") else ""
        devices = ",".join(map(str, row["devices"]))
        lines.append(f"  {name:<24} device {devices:<10} -> node {node.index} {where}{gpus}, pid {row['pid']}")
        if row["node_id"] != node.node_id:
            wrong.append(f"{name} (devices {list(row['devices'])}) is on {where}, expected {node}")
    if wrong:
        raise RuntimeError("workers landed on the wrong node:\n  " + "\n  ".join(wrong) + "\n" + "\n".join(lines))
    return "\n".join(lines)
