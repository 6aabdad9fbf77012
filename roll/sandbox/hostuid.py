"""Which host uid a sandboxed program runs as, how a root caller gets there, and the check from outside.

bubblewrap maps the sandbox's uid (65534 inside) onto the uid that started it. Started by root, the program
would be host uid 0: uid-checked host files such as /proc/sys/kernel/core_pattern would accept its writes.
So a root caller starts bubblewrap through launch.py, which drops to an unprivileged host uid first
(`ROLL_SANDBOX_HOST_UID`, default 65534 "nobody"); a non-root caller's own uid is already unprivileged.
After bubblewrap has built the sandbox, and before the program runs, the runner reads the sandbox's
/proc/<pid>/status from the host and refuses to go on if its uid is 0.
"""

import json
import os
import re
import select
import stat
import sys
import time

from roll.sandbox.isolation import SandboxUnavailable

DEFAULT_HOST_UID = 65534  # "nobody"/"nogroup" on the host
LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.py")
START_TIMEOUT_S = 30.0


def caller_is_root() -> bool:
    return os.getuid() == 0 or os.geteuid() == 0


def host_ids() -> tuple[int, int]:
    """(uid, gid) the sandboxed program will have on the host; raises SandboxUnavailable where that is 0."""
    if not caller_is_root():
        return os.getuid(), os.getgid()
    raw = os.environ.get("ROLL_SANDBOX_HOST_UID", str(DEFAULT_HOST_UID))
    try:
        uid = int(raw)
    except ValueError:
        uid = -1
    if not 0 < uid < 2**32 - 1:
        raise SandboxUnavailable(
            f"ROLL_SANDBOX_HOST_UID={raw!r}: the code sandbox never runs programs as host root; set it to an "
            "unprivileged uid that owns no files (default 65534, nobody) or unset it"
        )
    return uid, uid


def first_blocking_dir(path: str, uid: int, gid: int) -> str | None:
    """The topmost directory on the way to `path` that `uid` (with only `gid`) may not search; None if it
    may look up `path`."""
    parts = os.path.realpath(path).split(os.sep)[1:]
    for depth in range(len(parts)):
        directory = os.sep + os.sep.join(parts[:depth])
        try:
            info = os.stat(directory)
        except OSError:
            return directory
        if info.st_uid == uid:
            bit = stat.S_IXUSR
        elif info.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return directory
    return None


class Launch:
    """How a root caller starts bubblewrap (or, unsafe mode, the program itself): through launch.py, which
    drops to the unprivileged uid. Paths that uid cannot reach stay at their own paths: in the launcher's
    private mount namespace the blocking directory (e.g. /root, 0700) is covered by a tmpfs into which
    each such path is bound back. A non-root caller starts it directly (its uid is unprivileged)."""

    def __init__(self):
        self.uid, self.gid = host_ids()
        self.root = caller_is_root()
        self.covers: set[str] = set()
        self.binds: set[str] = set()

    def reach(self, path: str) -> None:
        """Make `path` reachable for the unprivileged uid (nothing to do for a non-root caller)."""
        blocking = first_blocking_dir(path, self.uid, self.gid) if self.root else None
        if blocking is None:
            return
        if blocking == os.sep:
            raise SandboxUnavailable(f"uid {self.uid} cannot search / on this machine")
        self.covers.add(blocking)
        self.binds.add(os.path.realpath(path))

    def command(self, argv: list[str]) -> list[str]:
        """The full command: `argv`, behind the launcher when the caller is root."""
        if not self.root:
            return argv
        stage = [[path, path] for path in sorted(self.binds, key=len)]  # outer paths first
        spec = {"uid": self.uid, "gid": self.gid, "tmpfs": sorted(self.covers), "stage": stage}
        python = os.path.realpath(sys.executable)
        return [python, "-I", "-S", "-B", LAUNCHER, json.dumps(spec), *argv]


def await_child_pid(info_fd: int, proc, timeout: float = START_TIMEOUT_S) -> int | None:
    """The host PID of the sandbox's first process, as bubblewrap reports on --info-fd once the namespaces
    exist; None if bubblewrap exited first. Raises SandboxUnavailable after `timeout` seconds."""
    data, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(rb'"child-pid":\s*(\d+)', data)
        if found and data.rstrip().endswith(b"}"):  # all of it: closing early would fail bubblewrap's next write
            return int(found.group(1))
        ready, _, _ = select.select([info_fd], [], [], 0.05)
        if ready:
            chunk = os.read(info_fd, 4096)
            if not chunk:
                return None
            data += chunk
        elif proc.poll() is not None:
            return None
    raise SandboxUnavailable(f"bubblewrap did not report its sandbox within {timeout:.0f} s")


def host_uid_of(pid: int) -> int | None:
    """The real uid of process `pid` as the host sees it (bubblewrap never changes a sandbox's real uid:
    it is the uid the program runs as); None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None  # bubblewrap failed while building the sandbox: nothing will run, its error comes back
    raise SandboxUnavailable(f"/proc/{pid}/status has no Uid line")


def refuse_host_root(pid: int) -> None:
    """Raise SandboxUnavailable if the sandbox `pid` is host uid 0 (checked from outside, before its program
    runs)."""
    uid = host_uid_of(pid)
    if uid == 0:
        raise SandboxUnavailable(
            f"the sandbox's process {pid} is host uid 0 (read from /proc/{pid}/status on the host), so a program "
            "in it could change host sysctls such as kernel.core_pattern; refusing to run it. Run the trainer as "
            "a non-root user, or as root with ROLL_SANDBOX_HOST_UID set to an unprivileged uid (default 65534)"
        )
