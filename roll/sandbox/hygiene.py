"""What a sandboxed run leaves on the host, and what reaps it when its caller was killed (issue 42).

A run writes no file: the program's source, the prelude and the seccomp filter reach bubblewrap as memory files
(memfd_create) that it copies into the sandbox's own tmpfs, so nothing of them is on the host's disk and they
go with the sandbox. What a run does create is its cgroups (memory and pids caps). They are named after the
caller (`<pid>-<start time>-<random>`): when the caller is SIGKILLed mid-run, its watcher shell (runner.py)
kills what is left in them and removes them; if the watcher was killed too, the next process that runs a
sandbox on the machine removes every group whose caller is gone (`reap_leftovers`). The same sweep removes
what versions before this one left: `roll_sandbox_*` directories (which held the program's source) and
`roll_seccomp_*.bpf` files in the temp directory, and their cgroups, once they are older than any run.
"""

import glob
import os
import re
import shutil
import signal
import tempfile
import threading
import time

OWNED = re.compile(r"^(\d+)-(\d+)-[0-9a-f]+$")  # <caller pid>-<caller start time>-<random>
LEGACY = re.compile(r"^[0-9a-f]{12}$")  # a random name: no owner to ask
LEGACY_AGE_S = 600.0  # older than any run (run_python's timeouts are seconds): its caller is gone
_reaped = False
_reap_lock = threading.Lock()


def memory_file(name: str, data: bytes) -> int:
    """A file in memory only (memfd) holding `data`, positioned at its start; the caller closes the fd."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.write(fd, data) if len(data) < 65536 else _write_all(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22), None if it is gone:
    with the pid, it names one process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def cgroup_name(random: str) -> str:
    """This process's name for a run's cgroup."""
    return f"{os.getpid()}-{start_ticks(os.getpid())}-{random}"


def _caller_gone(name: str, path: str) -> bool:
    owned = OWNED.match(name)
    if owned:
        return start_ticks(int(owned.group(1))) != int(owned.group(2))
    if LEGACY.match(name):
        try:
            return time.time() - os.stat(path).st_mtime > LEGACY_AGE_S
        except OSError:
            return False
    return False  # not a run's group (e.g. a subtree delegated to another user, or a test's own)


def _kill_members(group: str) -> None:
    for _ in range(20):
        try:
            with open(os.path.join(group, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def reap_cgroups(parents: list[str]) -> list[str]:
    """Remove the run cgroups under `parents` whose caller is gone (killing what is still in them); returns them."""
    removed = []
    for parent in parents:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            group = os.path.join(parent, name)
            if not os.path.isdir(group) or not _caller_gone(name, group):
                continue
            _kill_members(group)
            try:
                os.rmdir(group)
                removed.append(group)
            except OSError:
                pass  # not ours to remove, or a process still exiting: the next sweep tries again
    return removed


def reap_legacy_files(directory: str | None = None, uids: tuple = ()) -> list[str]:
    """Remove `roll_sandbox_*` directories and `roll_seccomp_*.bpf` files older than any run from `directory`
    (the temp directory), owned by one of `uids` (default: this process's)."""
    directory = directory or tempfile.gettempdir()
    uids = uids or (os.geteuid(),)
    removed = []
    for path in glob.glob(os.path.join(directory, "roll_sandbox_*")) + glob.glob(
        os.path.join(directory, "roll_seccomp_*.bpf")
    ):
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if info.st_uid not in uids or time.time() - info.st_mtime <= LEGACY_AGE_S:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                continue
        removed.append(path)
    return removed


def reap_leftovers(parents: list[str], uids: tuple = ()) -> None:
    """Once per process, before its first run: the sweep of the module docstring."""
    global _reaped
    with _reap_lock:
        if _reaped:
            return
        _reaped = True
    reap_cgroups(parents)
    reap_legacy_files(uids=uids)
