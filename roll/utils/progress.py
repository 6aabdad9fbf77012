"""A per-step progress line with the time spent in each phase and an ETA."""

import os
import threading
import time
from contextlib import contextmanager


class StepTimer:
    """Collects `timing/<phase>` seconds for one pipeline step. Phases may run at once on several threads
    (roll.pipeline.core.concurrency): `concurrent` lists each such group and `timing/overlap` adds up the
    seconds they saved (Σ their phases − the group's wall time), so the step's overhead stays wall − Σ phases
    + overlap."""

    def __init__(self):
        self.timings: dict[str, float] = {}
        # groups of lanes that ran at once, in the step's order; a lane: its phases' names, one after another
        self.concurrent: list[tuple[tuple[str, ...], ...]] = []
        self._lock = threading.Lock()

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(f"timing/{name}", time.perf_counter() - start)

    def add(self, key: str, seconds: float) -> None:
        with self._lock:
            self.timings[key] = self.timings.get(key, 0.0) + seconds

    def ran_together(self, lanes: tuple[tuple[str, ...], ...], phase_seconds: float, wall: float) -> None:
        """`lanes` ran at once: their phases took `phase_seconds` in all within `wall` seconds."""
        self.concurrent.append(lanes)
        self.add("timing/overlap", max(phase_seconds - wall, 0.0))


class ETA:
    def __init__(self, first_step: int, last_step: int):
        self.first_step, self.last_step = first_step, last_step
        self.start = time.perf_counter()

    def line(self, step: int) -> str:
        done = step - self.first_step + 1
        elapsed = time.perf_counter() - self.start
        remaining = elapsed / max(done, 1) * (self.last_step - step)
        return f"[{step + 1}/{self.last_step + 1}] elapsed {_fmt(elapsed)} ETA {_fmt(remaining)}"


def _fmt(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def process_age() -> float | None:
    """Seconds since this process started (its interpreter's launch, before any import), from Linux's /proc;
    None where there is none. The start-up figure a user waits for includes the imports before any timer."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            fields = stat.read().rpartition(")")[2].split()  # after "(comm)", which may hold spaces
            up = float(uptime.read().split()[0])
        return up - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: start time in clock ticks
    except (OSError, ValueError, IndexError):
        return None
