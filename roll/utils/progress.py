"""A per-step progress line with the time spent in each phase and an ETA."""

import os
import time
from contextlib import contextmanager


class StepTimer:
    """Collects `timing/<phase>` seconds for one pipeline step."""

    def __init__(self):
        self.timings: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[f"timing/{name}"] = self.timings.get(f"timing/{name}", 0.0) + time.perf_counter() - start


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
