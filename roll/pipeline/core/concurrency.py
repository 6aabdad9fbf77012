"""Independent phases at once, and the intra-op threads each role's workers use in a phase.

Lanes: phases whose roles share a device (or a role) take turns in one lane, in order (roll.pipeline.core.
colocation offloads between them); lanes run at once, one driver thread each, each phase a blocking call.
E.g. the RLVR demo after generation: [reward] ‖ [old_log_probs → ref_log_probs] (trainer and reference share
device 0). Values do not depend on the order: every phase reads the generated batch and writes its own key.

Threads (`ThreadPlan`): a worker whose phase runs alone gets every CPU core of its node; workers that run at
once share their node's cores (one lane counts as its largest role on the node). Roles that run between the
pipeline's phases (`background`: an async rollout's engine and graders) always count. The count is a
function of the config and the placement, never of timing, so reruns of a config are bit-identical. A role
whose own `system_envs` sets OMP_NUM_THREADS keeps that setting (the pipeline-wide system_envs value is only
each worker's start-up value).
"""

import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager

from roll.utils.progress import StepTimer

Phase = tuple[str, str | frozenset, Callable[[], object]]  # (timer name, role(s), blocking call)


def lanes_by_devices(phases: Iterable[Phase], devices: dict[str, set]) -> list[list[Phase]]:
    """Phases grouped into lanes: two phases share a lane when their roles are the same or share a device;
    order within a lane is the given order."""
    lanes: list[tuple[set, set, list[Phase]]] = []  # (roles, devices, phases)
    for phase in phases:
        roles = _roles(phase)
        used = set().union(*(devices.get(role, set()) for role in roles))
        joined = [lane for lane in lanes if lane[0] & roles or lane[1] & used]
        merged = (set(roles), set(used), [])
        for lane in joined:
            merged[0].update(lane[0])
            merged[1].update(lane[1])
            merged[2].extend(lane[2])
        merged[2].append(phase)
        lanes = [lane for lane in lanes if all(lane is not other for other in joined)] + [merged]
    return [phases for _, _, phases in lanes]


def lane_roles(lanes: list[list[Phase]]) -> list[set[str]]:
    return [set().union(*(_roles(phase) for phase in lane)) for lane in lanes]


def run_lanes(lanes: list[list[Phase]], timer: StepTimer, parallel: bool = True) -> None:
    """Every lane's phases, timed as `timing/<name>`; lanes at once when `parallel` (else one after another,
    as the sequential loop did). The first error raises once every lane has ended."""
    if not parallel or len(lanes) < 2:
        for lane in lanes:
            _run_lane(lane, timer)
        return
    started = time.perf_counter()
    with ThreadPoolExecutor(len(lanes), thread_name_prefix="phase-lane") as pool:
        futures = [pool.submit(_run_lane, lane, timer) for lane in lanes]
        wait(futures)
    wall = time.perf_counter() - started
    seconds = sum(future.result() for future in futures)  # raises the first lane's error
    timer.ran_together(tuple(tuple(name for name, _, _ in lane) for lane in lanes), seconds, wall)


def _run_lane(lane: list[Phase], timer: StepTimer) -> float:
    total = 0.0
    for name, _, call in lane:
        started = time.perf_counter()
        try:
            call()
        finally:
            seconds = time.perf_counter() - started
            timer.add(f"timing/{name}", seconds)
            total += seconds
    return total


def _roles(phase: Phase) -> set[str]:
    roles = phase[1]
    return {roles} if isinstance(roles, str) else set(roles)


class ThreadPlan:
    """Sets each role's `Cluster.threads` (sent with its calls; the worker applies it with torch.set_num_threads)
    for the phase about to run. `placements`: the workers' describe_placement() rows in `clusters` order."""

    def __init__(self, clusters: dict, placements: list[dict], background: Iterable[str] = ()):
        self.clusters = clusters
        self.nodes: dict[str, list[str]] = {}  # role → its workers' node ids
        self.cpus: dict[str, int] = {}  # node id → CPU cores
        rows = iter(placements)
        for name, cluster in clusters.items():
            for _ in range(cluster.world_size):
                row = next(rows)
                self.nodes.setdefault(name, []).append(row["node_id"])
                self.cpus[row["node_id"]] = int(row.get("cpus") or 1)
        self.fixed = {
            name for name, cluster in clusters.items() if "OMP_NUM_THREADS" in (cluster.worker_config.system_envs or {})
        }
        self.background = set(background) & set(clusters)
        self.held: set[str] = set()  # the roles of the concurrent block running now

    def shares(self, lanes: list[set[str]]) -> dict[str, int]:
        """role → threads per worker, for these lanes running at once (plus the background roles)."""
        busy = set().union(*lanes) if lanes else set()
        counts: Counter = Counter()
        for lane in [*lanes, *({role} for role in sorted(self.background - busy))]:
            per_node: Counter = Counter()
            for role in lane:
                for node, workers in Counter(self.nodes.get(role, ())).items():
                    per_node[node] = max(per_node[node], workers)
            counts.update(per_node)
        return {
            role: max(1, min(self.cpus[node] // counts[node] for node in self.nodes[role]))
            for role in sorted(busy)
            if role in self.nodes
        }

    def enter(self, *lanes: Iterable[str]) -> None:
        """The next phase runs these lanes of roles at once (one lane: the phase runs alone). Inside a
        `together` block its own roles keep the block's setting."""
        lanes = [set(lane) for lane in lanes]
        if self.held and set().union(*lanes) <= self.held:
            return
        for role, threads in self.shares(lanes).items():
            if role not in self.fixed:
                self.clusters[role].threads = threads

    @contextmanager
    def together(self, lanes: list[set[str]]):
        self.enter(*lanes)
        self.held = set().union(*lanes) if lanes else set()
        try:
            yield
        finally:
            self.held = set()
