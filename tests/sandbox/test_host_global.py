"""Host-global writes a root process could make, tried from inside the sandbox and judged from OUTSIDE: the
test reads each host value before and after the run, restores any that changed, and then fails. Also the
sandboxed program's uid as the host sees it (never 0), and the corpus re-run by an unprivileged caller.

Run as root (as CI does), a sandbox whose program is host uid 0 lets it write uid-checked host files:
/proc/sys/kernel/core_pattern is one crash away from running a program as host root."""

import os
import platform
import subprocess
import sys
import threading
import time
import uuid

import pytest

from roll.sandbox import run_python
from roll.sandbox.isolation import CGROUP_V1
from tests.sandbox.test_hostile import _sandboxed_pids

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSCTLS = {  # host sysctl -> hostile value (one that differs from any default)
    "kernel/core_pattern": "roll-hostile-core",
    "kernel/modprobe": "/tmp/roll-hostile-modprobe",
    "kernel/hostname": "roll-hostile",
    "kernel/domainname": "roll-hostile",
    "kernel/panic": "17",
    "kernel/ctrl-alt-del": None,  # judged only: the program calls reboot(CAD_OFF) instead
    "kernel/randomize_va_space": None,  # 0 unless it is 0 now, then 2
    "kernel/sysrq": "1",
    "vm/overcommit_memory": None,  # 1 unless it is 1 now, then 0
    "fs/suid_dumpable": None,
}
SYS_FILES = ["/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/uevent_helper"]


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _keys_of(uid: int) -> str | None:
    """The uid's line of /proc/key-users (usage and key counts), None if it owns no keys."""
    for line in (_read("/proc/key-users") or "").splitlines():
        if line.split(":")[0].strip() == str(uid):
            return line.split(":", 1)[1].split()[1]  # nkeys/nikeys
    return None


def _sentinel_cgroup() -> str:
    """A cgroup made for the test (pids.max 7): what the program must not change, join or extend."""
    if os.environ.get("ROLL_TEST_CGROUP_SENTINEL"):
        return os.environ["ROLL_TEST_CGROUP_SENTINEL"]
    v1 = os.path.isdir(os.path.join(CGROUP_V1, "pids"))
    path = os.path.join(CGROUP_V1, "pids" if v1 else "", f"roll_hostile_{uuid.uuid4().hex[:8]}")
    os.mkdir(path)
    with open(os.path.join(path, "pids.max"), "w") as f:
        f.write("7")
    return path


def snapshot(sentinel: str, host_uid: int) -> dict:
    state = {f"/proc/sys/{name}": _read(f"/proc/sys/{name}") for name in SYSCTLS}
    state.update({path: _read(path) for path in SYS_FILES})
    state["sentinel pids.max"] = _read(os.path.join(sentinel, "pids.max"))
    state["sentinel procs"] = _read(os.path.join(sentinel, "cgroup.procs"))
    state["cgroup made by the program"] = os.path.exists(os.path.join(os.path.dirname(sentinel), "roll_hostile_made"))
    state[f"keys of host uid {host_uid}"] = _keys_of(host_uid)
    state["wall clock - monotonic (s)"] = round(time.time() - time.monotonic())
    return state


def restore(before: dict, after: dict) -> list[str]:
    """Put back every host value that changed; returns what changed."""
    changed = []
    for key, value in before.items():
        if after[key] == value:
            continue
        if key == "wall clock - monotonic (s)" and abs(after[key] - value) <= 2:
            continue  # NTP slew and rounding
        changed.append(f"{key}: {value!r} -> {after[key]!r}")
        if key.startswith("/") and value is not None:
            if "[" in value:  # /sys choice files show the current choice in brackets
                value = value.split("[")[1].split("]")[0]
            with open(key, "w") as f:
                f.write(value)
    return changed


def hostile_program(sentinel: str, values: dict) -> str:
    """One program that tries each host-global write a root process could make, printing what it did."""
    syscalls = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(platform.machine(), (248, 250))
    return f"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):  # fn returns None (a write that did not raise) or whether the call succeeded
    try:
        done = fn()
        print('DONE' if done in (None, True) else 'refused', name, ctypes.get_errno())
    except OSError as error:
        print('refused', name, error.errno)
def write(path, value):
    with open(path, 'w') as f:
        f.write(value)
for path, value in {values!r}.items():
    attempt('write ' + path, lambda: write(path, value))
for path in ('/proc/sysrq-trigger', '/proc/sys/vm/drop_caches'):
    attempt('write ' + path, lambda: write(path, 'h' if 'sysrq' in path else '1'))
attempt('write sentinel pids.max', lambda: write({sentinel!r} + '/pids.max', 'max'))
attempt('join sentinel cgroup', lambda: write({sentinel!r} + '/cgroup.procs', str(os.getpid())))
attempt('mkdir cgroup', lambda: os.mkdir({os.path.dirname(sentinel)!r} + '/roll_hostile_made'))
attempt('sethostname', lambda: libc.sethostname(b'roll-hostile', 12) == 0)
attempt('setdomainname', lambda: libc.setdomainname(b'roll-hostile', 12) == 0)
attempt('reboot(CAD_OFF)', lambda: libc.reboot(0) == 0)
add_key, keyctl = {syscalls!r}
attempt('add_key', lambda: libc.syscall(add_key, b'user', b'roll-hostile', b'x', 1, ctypes.c_long(-4)) >= 0)
attempt('keyctl join session', lambda: libc.syscall(keyctl, 1, b'roll-hostile') >= 0)
class timespec(ctypes.Structure):
    _fields_ = [('sec', ctypes.c_long), ('nsec', ctypes.c_long)]
attempt('clock_settime', lambda: libc.clock_settime(0, ctypes.byref(timespec(int(time.time()) + 86400, 0))) == 0)
"""


def _hostile_values(before: dict) -> dict:
    values = {}
    for name, value in SYSCTLS.items():
        now = before[f"/proc/sys/{name}"]
        if now is None or name == "kernel/ctrl-alt-del":
            continue
        if value is None:
            value = {"kernel/randomize_va_space": "0", "vm/overcommit_memory": "1", "fs/suid_dumpable": "2"}[name]
            value = value if now != value else {"0": "2", "1": "0", "2": "0"}[value]
        values[f"/proc/sys/{name}"] = value
    thp = before[SYS_FILES[0]]
    if thp is not None:
        values[SYS_FILES[0]] = "never" if "[never]" not in thp else "always"
    if before[SYS_FILES[1]] is not None:
        values[SYS_FILES[1]] = "/tmp/roll-hostile-helper"
    return values


def _program_pids() -> set[int]:
    """Host PIDs of sandboxed programs: python started on /sandbox/prelude.py (not bubblewrap, the launcher
    or the caller's watcher shell, whose command lines also name it)."""
    return {pid for pid in _sandboxed_pids() if _argv(pid)[1:5] == [b"-I", b"-S", b"-B", b"/sandbox/prelude.py"]}


def _argv(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def expected_host_uid() -> int:
    """65534 for a root caller (ROLL_SANDBOX_HOST_UID picks another), else the caller's own uid."""
    return int(os.environ.get("ROLL_SANDBOX_HOST_UID", "65534")) if os.getuid() == 0 else os.getuid()


def test_host_global_writes_change_nothing_on_the_host():
    assert _read("/proc/sys/kernel/core_pattern") is not None and _read("/proc/sys/vm/overcommit_memory") is not None
    sentinel = _sentinel_cgroup()
    made_here = "ROLL_TEST_CGROUP_SENTINEL" not in os.environ
    uid = expected_host_uid()
    before = snapshot(sentinel, uid)
    values = _hostile_values(before)
    try:
        result = run_python(hostile_program(sentinel, values), timeout=10)
    finally:
        changed = restore(before, snapshot(sentinel, uid))
        if made_here:
            os.rmdir(sentinel)
        made = os.path.join(os.path.dirname(sentinel), "roll_hostile_made")
        if os.path.isdir(made):
            os.rmdir(made)
    assert changed == [], f"the sandboxed program changed the host (restored): {changed}\n{result.stdout}"
    assert result.returncode == 0, result.stderr
    # every attempt ran and was refused: the writes, sysrq and drop_caches, 3 cgroup ones, 8 syscalls
    assert result.stdout.count("refused") == len(values) + 2 + 3 + 6 and "DONE" not in result.stdout, result.stdout
    # /proc is read-only inside whatever the uid (EROFS, not only EACCES); /sys is not there at all
    for line in result.stdout.splitlines():
        if line.startswith("refused write /proc/sys/"):
            assert line.split()[-1] == "30", line
        if line.startswith("refused write /sys/"):
            assert line.split()[-1] == "2", line


def test_the_sandboxed_program_is_not_host_root():
    """Read from the host, the sandboxed program's /proc/<pid>/status shows an unprivileged uid and gid (65534
    for a root caller) and no supplementary groups."""
    before = _program_pids()
    runner = threading.Thread(target=run_python, args=("import time\ntime.sleep(1.0)",), kwargs={"timeout": 5})
    runner.start()
    try:
        deadline = time.monotonic() + 5
        while not _program_pids() - before and time.monotonic() < deadline:
            time.sleep(0.02)
        pids = _program_pids() - before
        assert pids, "the sandboxed program never started"
        for pid in pids:
            status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
            uids, gids = status["Uid"].split(), status["Gid"].split()
            assert uids == [str(expected_host_uid())] * 4, f"host uid of sandboxed pid {pid}: {uids}"
            assert "0" not in gids and status["Groups"].split() == [], (gids, status["Groups"])
    finally:
        runner.join()


def test_refuses_a_host_root_sandbox(monkeypatch):
    from roll.sandbox import SandboxUnavailable, hostuid

    if os.getuid() == 0:  # asked to run programs as host root: refused before anything starts
        monkeypatch.setenv("ROLL_SANDBOX_HOST_UID", "0")
        with pytest.raises(SandboxUnavailable, match="ROLL_SANDBOX_HOST_UID='0'.*never runs programs as host root"):
            run_python("print(1)")
        monkeypatch.delenv("ROLL_SANDBOX_HOST_UID")
    # the check from outside: a sandbox the host sees as uid 0 is killed before its program runs
    monkeypatch.setattr(hostuid, "host_uid_of", lambda pid: 0)
    before = set(_sandboxed_pids())
    start = time.monotonic()
    with pytest.raises(SandboxUnavailable, match=r"host uid 0 \(read from /proc/\d+/status"):
        run_python("import time\ntime.sleep(5)")
    assert time.monotonic() - start < 3 and set(_sandboxed_pids()) - before == set()


def _interpreter_paths() -> list[str]:
    """What the inner pytest must reach as the unprivileged uid: the base interpreter, the virtualenv (if any)
    and every directory on sys.path (site-packages, a user's ~/.local, editable installs)."""
    paths = {os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))), sys.prefix, sys.base_prefix}
    paths.update(entry for entry in sys.path if entry and os.path.isdir(entry))
    return sorted(os.path.realpath(path) for path in paths)


def test_corpus_runs_as_an_unprivileged_caller():
    """The host-global, hostile and hygiene tests again, with the trainer itself as uid 65534 (launch.py drops to it
    and makes the interpreter and the repo reachable at their paths), judged again from outside here."""
    if os.getuid() != 0:
        pytest.skip(f"this session already runs as uid {os.getuid()}: the corpus above ran unprivileged")
    from roll.sandbox import hostuid

    parent = f"roll_sandbox/unprivileged_{uuid.uuid4().hex[:8]}"  # a cgroup subtree delegated to uid 65534
    delegated = [os.path.join(CGROUP_V1, h, parent) for h in ("memory", "pids")]
    if not os.path.isdir(os.path.join(CGROUP_V1, "pids")):
        delegated = [os.path.join(CGROUP_V1, parent)]
    sentinel = _sentinel_cgroup()
    launch = hostuid.Launch()  # as uid 65534, with the interpreter, its packages and the repo at their paths
    for path in _interpreter_paths() + [REPO]:
        launch.reach(path)
    files = ["tests/sandbox/test_host_global.py", "tests/sandbox/test_hostile.py", "tests/sandbox/test_hygiene.py"]
    # left out for time: limits enforced by the cgroup and wall clock whoever the caller is (the fork storm
    # stays: RLIMIT_NPROC counts per uid, and every sandbox of this caller has the same one)
    slow = "spawn or memory_split or infinite or flood or fd_and_disk or caller_can_be_killed or controls or hang"
    slow += " or unprivileged"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "PYTHONPATH": REPO,
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "ROLL_SANDBOX_CGROUP_PARENT": parent,
        "ROLL_TEST_CGROUP_SENTINEL": sentinel,
    }
    before = snapshot(sentinel, launch.uid)
    try:
        for group in delegated:
            os.makedirs(group)
            os.chown(group, launch.uid, launch.gid)
        # sys.executable as it is, not its realpath: a virtualenv's python is a link to the base interpreter, and
        # only started through the link does it find the venv's pyvenv.cfg and so its packages (bwrap, pyseccomp)
        inner = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
        ran = subprocess.run(
            launch.command([*inner, "-k", f"not ({slow})"]),
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        changed = restore(before, snapshot(sentinel, launch.uid))
        for group in [*delegated, sentinel]:
            for child in os.listdir(group) if os.path.isdir(group) else []:
                if os.path.isdir(os.path.join(group, child)):
                    os.rmdir(os.path.join(group, child))  # runs the inner pytest could not remove
            os.rmdir(group)
    assert changed == [], f"the unprivileged run changed the host (restored): {changed}"
    assert ran.returncode == 0, (
        f"the corpus failed for an unprivileged caller:\n{ran.stdout[-3000:]}{ran.stderr[-2000:]}"
    )
    assert " passed" in ran.stdout and " failed" not in ran.stdout, ran.stdout[-2000:]
