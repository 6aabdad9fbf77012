"""Roles that share device ids take turns: before a phase its roles are reloaded and every other
resident role on the same devices is offloaded (weights, gradients, optimizer state or KV cache, as each
strategy can). Roles on separate devices are never touched. On a CPU-only machine the training
strategies' offload/reload run the same code as on a GPU (host copies, compute storages freed:
roll/strategies/offload.py); inference engines without a sleep mode there keep their weights, and a role
whose engines say their offload frees nothing (`offload_frees_memory`, asked once) is not called for it
again: two Ray round trips a step saved. A role is touched only after use() made it resident: an offloaded
engine's tensors have no memory until reload."""

import threading
import time


class PhaseMemory:
    def __init__(self, clusters: dict, device_mappings: dict):
        self.clusters = clusters
        self.devices = {name: set(device_mappings.get(name) or ()) for name in clusters}
        self.resident = {name for name in clusters if self.devices[name]}  # everything starts loaded
        self.seconds = 0.0
        self._frees: dict[str, bool] = {}  # role → whether its offload frees anything (asked once)
        self._lock = threading.Lock()  # phases of different lanes run at once (roll.pipeline.core.concurrency)

    def use(self, *roles: str) -> None:
        """Make `roles` resident, offloading idle roles that share a device with them."""
        with self._lock:
            self._use(roles)

    def _use(self, roles: tuple) -> None:
        started = time.perf_counter()
        needed = set().union(*(self.devices[role] for role in roles))
        for other in sorted(self.resident - set(roles)):
            if self.devices[other] & needed and self._offload_frees_memory(other):
                self.clusters[other].offload()
                self.resident.discard(other)
        for role in roles:
            if self.devices[role] and role not in self.resident:
                self.clusters[role].reload()
                self.resident.add(role)
        self.seconds += time.perf_counter() - started

    def _offload_frees_memory(self, role: str) -> bool:
        if role not in self._frees:
            self._frees[role] = any(self.clusters[role].offload_frees_memory())  # one answer per rank
        return self._frees[role]
