"""Acceptance (issue 42): SIGTERM (a scheduler's preemption) and Ctrl-C stop a real launcher run cleanly.

Real signals against `examples/start_rlvr_pipeline.py` in a child process on the demo (the session's data and
uninterrupted_run's settings, 4 steps), judged from outside: its exit status, its last line, its checkpoint
and the process table — every process the run started carries a marker in its environment (Ray's GCS, raylet
and workers inherit the launcher's), and none may be alive 5 s after the launcher exits.

1. SIGTERM after step 1: the run finishes its step, writes a checkpoint, exits 143 with one line naming it
   and the resume command. Running that command finishes the run, and its steps' metrics, samples and final
   weights equal the uninterrupted run's (fp32 on CPU: exact).
2. Ctrl-C during start-up (Ray up, roles starting): it stops at once, one line, no traceback, exits 130,
   nothing left running. A second signal during a step stops at once the same way (the same teardown); its
   logic is tested with real signals, without a run, in tests/reliability/test_stopping.py.
"""

import os
import shlex
import signal
import subprocess
import sys
import time
import uuid

import pytest
import torch
from safetensors.torch import load_file

from roll.utils import checkpoint
from tests.pipeline.helpers import NO_REFERENCE, REPO, SMALL_RUN, data_overrides

STEPS = 4
NONDETERMINISTIC = ("timing/", "weight_sync/seconds", "system/sent_bytes")
LAUNCHER = "examples/start_rlvr_pipeline.py"


def marked_processes(marker: str) -> dict[int, str]:
    """pid → command line of every process whose environment holds `marker`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                found[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            pass  # gone meanwhile, or not ours to read
    return found


class Launch:
    """The launcher in a child process (its own session, a local Ray of its own), read line by line."""

    def __init__(self, command: list[str]):
        self.marker = f"roll-stop-test-{uuid.uuid4().hex}"
        env = {**os.environ, "ROLL_STOP_TEST_MARKER": self.marker, "RAY_ADDRESS": "local", "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.seen_running: dict[int, str] = {}

    def until(self, condition, timeout: float = 300.0) -> None:
        """Read output until `condition(line)` holds for a line."""
        deadline = time.monotonic() + timeout
        for line in self.process.stdout:
            self.lines.append(line)
            if condition(line):
                return
            assert time.monotonic() < deadline, "".join(self.lines[-30:])
        pytest.fail(f"the run ended before the expected line:\n{''.join(self.lines[-30:])}")

    def signal(self, signum: int, times: int = 1) -> None:
        self.seen_running = marked_processes(self.marker)  # what the check below would miss if it were blind
        for _ in range(times):
            os.kill(self.process.pid, signum)
            time.sleep(0.05)

    def finish(self, timeout: float = 300.0) -> tuple[int, str]:
        """Wait for the exit; returns (status, the last output line). Asserts no traceback and, 5 s after the
        exit, no process of the run."""
        rest, _ = self.process.communicate(timeout=timeout)
        self.lines += rest.splitlines(keepends=True)
        output = "".join(self.lines)
        assert "Traceback" not in output, output[-4000:]
        time.sleep(5)
        left = marked_processes(self.marker)
        assert left == {}, f"processes of the stopped run still alive 5 s after it exited: {left}"
        return self.process.returncode, self.lines[-1].strip()


def command(demo_dir, out, *overrides) -> list[str]:
    """uninterrupted_run's settings, through the launcher, with metrics in TensorBoard and the rollout log."""
    return [
        sys.executable,
        LAUNCHER,
        *data_overrides(demo_dir),
        f"output_dir={out}",
        *SMALL_RUN,
        f"max_steps={STEPS}",
        "save_steps=2",
        NO_REFERENCE,
        "track_with=tensorboard",
        f"+rollout_dump_dir={out / 'rollout_log'}",
        *overrides,
    ]


def tensorboard_scalars(directory) -> dict[int, dict[str, float]]:
    """step → metric → value of every event file under `directory`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps: dict[int, dict[str, float]] = {}
    for run in {path.parent for path in directory.rglob("events.out.tfevents.*")}:
        events = EventAccumulator(str(run), size_guidance={"scalars": 0})
        events.Reload()
        for tag in events.Tags()["scalars"]:
            for event in events.Scalars(tag):
                steps.setdefault(event.step, {})[tag] = event.value
    return steps


def _deterministic(metrics: dict) -> dict:
    """The metrics two runs must agree on, as TensorBoard stores them (float32)."""
    kept = {k: v for k, v in metrics.items() if not k.startswith(NONDETERMINISTIC)}
    return {k: float(torch.tensor(v, dtype=torch.float32)) for k, v in kept.items()}


@pytest.fixture(scope="module")
def stopped(demo_dir, tmp_path_factory):
    """The run SIGTERMed after its first step: {"out", "status", "line", "launch"}."""
    out = tmp_path_factory.mktemp("stopped") / "out"
    started = time.monotonic()
    launch = Launch(command(demo_dir, out))
    launch.until(lambda line: f"[1/{STEPS}]" in line)
    launch.signal(signal.SIGTERM)
    status, line = launch.finish()
    return {"out": out, "status": status, "line": line, "launch": launch, "seconds": time.monotonic() - started}


def test_sigterm_stops_after_the_step_with_a_checkpoint_and_no_process_left(stopped):
    launch = stopped["launch"]
    assert any(cmd.startswith("ray::") for cmd in launch.seen_running.values()), launch.seen_running
    assert stopped["status"] == 143, "".join(launch.lines[-20:])
    line = stopped["line"]
    assert line.startswith("stopped by SIGTERM at a safe point, "), line
    done = int(line.split(", ")[1].split(" of ")[0])
    assert 1 <= done < STEPS, line  # the signal came during step 2 (or 3 on a loaded machine)
    path = stopped["out"] / "checkpoints" / f"step-{done}"
    assert f"checkpoint: {path};" in line, line
    checkpoint.verify(path, checksums=True)  # complete: every file matches its manifest
    assert (stopped["out"] / "checkpoints" / "latest").read_text().strip() == f"step-{done}"
    assert not list((stopped["out"] / "checkpoints").glob("*.tmp"))
    assert line.endswith(" resume_from_checkpoint=true") and f"output_dir={stopped['out']}" in line, line


def test_the_printed_command_resumes_to_the_uninterrupted_runs_numbers(stopped, uninterrupted_run):
    resume = shlex.split(stopped["line"].split("; to resume: ", 1)[1])
    resumed = Launch(resume)
    status, _ = resumed.finish()
    assert status == 0, "".join(resumed.lines[-20:])
    done = int(stopped["line"].split(", ")[1].split(" of ")[0])
    assert any(f"resumed from {stopped['out'] / 'checkpoints' / f'step-{done}'}" in line for line in resumed.lines)
    full, out = uninterrupted_run["history"]["steps"], stopped["out"]
    logged = tensorboard_scalars(out / "tensorboard")
    for step in range(STEPS):  # steps 1..done from the stopped run, the rest from the resumed one
        assert _deterministic(logged[step + 1]) == _deterministic(full[step]), f"step {step + 1}"
    for step in range(STEPS):  # samples, responses and scores of every step (0-based, as ROLL names them)
        name = f"rollout_dump_data.step_{step}.jsonl"
        assert (out / "rollout_log" / name).read_text() == (uninterrupted_run["rollout_log"] / name).read_text()
    final = load_file(out / "checkpoints" / f"step-{STEPS}" / "actor_train" / "hf" / "model.safetensors")
    expected = uninterrupted_run["history"]["inspected"]  # actor_train's weights at the end
    assert final.keys() == expected.keys()
    assert all(torch.equal(final[name], expected[name]) for name in expected)


def test_ctrl_c_during_start_up_prints_one_line(demo_dir, tmp_path):
    launch = Launch(command(demo_dir, tmp_path / "out"))
    deadline = time.monotonic() + 120
    while not any("raylet" in cmd for cmd in marked_processes(launch.marker).values()):  # Ray is starting
        assert time.monotonic() < deadline and launch.process.poll() is None, "Ray never started"
        time.sleep(0.1)
    launch.signal(signal.SIGINT)
    status, line = launch.finish()
    assert status == 130, "".join(launch.lines[-20:])
    assert line.startswith("stopped by SIGINT during start-up, before any step: nothing was trained; to start "), line
