"""The worker side of the `profiler` blocks (roll.configs.profiler): one profiling session per profiled step.

The driver calls `start_profile(step, settings)` on a role's workers before a profiled step and `stop_profile()`
after it; in between, every @register-ed call the worker answers runs inside a named range
`<role>.<method>` (roll.distributed.decorator), so a trace reads as the step's phases.
"""

import contextlib
import json
import os
from pathlib import Path

import torch


class WorkerProfiler:
    """One session: `tool` in torch | torch_memory | nsys; files go to <save_path>/<role>/step-<N>/rank<r>.*"""

    def __init__(self, role: str, rank: int, step: int, settings: dict):
        self.role, self.rank, self.step, self.tool = role, rank, step, settings["tool"]
        self.directory = Path(settings["save_path"]) / role / f"step-{step}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.prefix = self.directory / f"rank{rank}"
        self.cuda = torch.cuda.is_available()
        self.session = None
        if self.tool in ("torch", "torch_memory"):
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.cuda:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            memory = self.tool == "torch_memory"
            # memory: every allocation and free becomes a trace event; shapes tie them to the ops
            self.session = torch.profiler.profile(activities=activities, profile_memory=memory, record_shapes=memory)
            if memory and self.cuda:
                torch.cuda.memory._record_memory_history(max_entries=100_000)
            self.session.start()
        elif self.tool == "nsys":
            # the worker runs under `nsys profile --capture-range=cudaProfilerApi` (roll.distributed.cluster)
            torch.cuda.profiler.start()
        else:
            raise ValueError(f"profiler tool {self.tool!r}: expected torch, torch_memory or nsys")

    def phase(self, name: str):
        if self.tool == "nsys":
            return torch.cuda.nvtx.range(f"{self.role}.{name}")
        if self.session is None:
            return contextlib.nullcontext()
        return torch.profiler.record_function(f"{self.role}.{name}")

    def stop(self) -> list[str]:
        """Ends the session and writes its files; returns their paths."""
        written = []
        if self.tool == "nsys":
            torch.cuda.profiler.stop()
            return written
        self.session.stop()
        trace = f"{self.prefix}.pt.trace.json"
        self.session.export_chrome_trace(trace)
        written.append(trace)
        if self.tool == "torch_memory":
            if self.cuda:  # the allocator's own history: drag the pickle into pytorch.org/memory_viz
                snapshot = f"{self.prefix}.memory_snapshot.pickle"
                torch.cuda.memory._dump_snapshot(snapshot)
                torch.cuda.memory._record_memory_history(enabled=None)
                written.append(snapshot)
            else:
                timeline = f"{self.prefix}.memory_timeline.json"
                Path(timeline).write_text(json.dumps(memory_timeline(trace)))
                written.append(timeline)
        return [os.path.abspath(path) for path in written]


def memory_timeline(trace_path: str) -> dict:
    """CPU memory over the session from the trace's `[memory]` events: torch's allocator total after each
    allocation/free, counted from the session's start (tensors that existed before it are not in it).
    torch's own export_memory_timeline is not used: on a DeepSpeed model it fails its data-flow check
    (torch 2.13: "duplicate outputs")."""
    events = [e for e in json.loads(Path(trace_path).read_text())["traceEvents"] if e.get("name") == "[memory]"]
    events.sort(key=lambda e: e["ts"])
    allocated = [e["args"]["Total Allocated"] for e in events]
    return {
        "what": "torch CPU allocator: bytes allocated since the profiling session started, after each event",
        "ts_us": [e["ts"] for e in events],
        "allocated_bytes": allocated,
        "peak_allocated_bytes": max(allocated, default=0),
        "events": len(events),
    }
