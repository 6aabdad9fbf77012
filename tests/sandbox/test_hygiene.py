"""What a killed caller leaves is reaped (issue 42): run cgroups are named after their caller (pid and start time),
and the first run of the next process removes every group whose caller is gone, killing what is still in it;
earlier versions' temp files (`roll_sandbox_*`, which held the program's source, and `roll_seccomp_*.bpf`) are
removed once older than any run. Judged from outside: the cgroup directories and the process table."""

import os
import subprocess
import sys
import time
import uuid

from roll.sandbox import hygiene, isolation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dead_callers_name() -> str:
    """A cgroup name whose caller has exited (a real process's pid and start time, as a killed caller leaves)."""
    caller = subprocess.Popen(["sleep", "30"])
    ticks = hygiene.start_ticks(caller.pid)
    caller.kill()
    caller.wait()
    return f"{caller.pid}-{ticks}-{uuid.uuid4().hex[:12]}"


def make_groups(name: str) -> list[str]:
    """The run cgroup directories `name` would have (every hierarchy isolation.Cgroup uses)."""
    made = []
    for parent in isolation.cgroup_parents():
        if os.path.isdir(parent) and os.path.exists(os.path.join(parent, "cgroup.procs")):
            os.mkdir(os.path.join(parent, name))
            made.append(os.path.join(parent, name))
    assert made, f"no run cgroup parent under {isolation.CGROUP_V1}"
    return made


def test_a_dead_callers_groups_are_removed_and_emptied_a_live_ones_kept():
    isolation.Cgroup(64, 4).remove()  # the parents exist as a run makes them
    dead, alive = make_groups(dead_callers_name()), make_groups(hygiene.cgroup_name(uuid.uuid4().hex[:12]))
    survivor = subprocess.Popen(["sleep", "30"])  # what a killed watcher would have left running in the group
    try:
        with open(os.path.join(dead[-1], "cgroup.procs"), "w") as f:
            f.write(str(survivor.pid))
        removed = hygiene.reap_cgroups(isolation.cgroup_parents())
        assert set(dead) <= set(removed) and not set(alive) & set(removed)
        assert not any(os.path.exists(group) for group in dead) and all(os.path.isdir(g) for g in alive)
        assert survivor.wait(timeout=5) == -9  # killed, not left running outside any cap
    finally:
        survivor.kill()
        for group in dead + alive:
            if os.path.isdir(group):
                os.rmdir(group)


def test_earlier_versions_temp_files_are_removed_once_older_than_any_run(tmp_path):
    old, fresh = time.time() - hygiene.LEGACY_AGE_S - 60, time.time()
    paths = {
        "roll_sandbox_abc": old,
        "roll_sandbox_new": fresh,
        "roll_seccomp_x.bpf": old,
        "roll_seccomp_y.bpf": fresh,
        "unrelated_old": old,
    }
    for name, mtime in paths.items():
        path = tmp_path / name
        if name.startswith("roll_sandbox_"):
            path.mkdir()
            (path / "main.py").write_text("print('the program')")
        else:
            path.write_text("x")
        os.utime(path, (mtime, mtime))
    removed = hygiene.reap_legacy_files(str(tmp_path))
    assert sorted(os.path.basename(p) for p in removed) == ["roll_sandbox_abc", "roll_seccomp_x.bpf"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["roll_sandbox_new", "roll_seccomp_y.bpf", "unrelated_old"]


def test_the_next_process_to_run_a_sandbox_reaps_them():
    isolation.Cgroup(64, 4).remove()
    dead = make_groups(dead_callers_name())
    try:
        script = "from roll.sandbox import run_python\nprint(run_python('print(6 * 7)').stdout, end='')\n"
        ran = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONPATH": REPO},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.stdout == "42\n", ran.stderr
        assert not any(os.path.exists(group) for group in dead), "a dead caller's cgroups were left"
    finally:
        for group in dead:
            if os.path.isdir(group):
                os.rmdir(group)
