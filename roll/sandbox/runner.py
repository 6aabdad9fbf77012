"""run_python: model-generated code in a separate, resource-limited, network-less process.

Layers (see docs/agentic_envs.md for which ones hold on a given machine):
- a fresh `python -I -S -B` process in its own session, killed as a process group on timeout;
- rlimits (address space, CPU seconds, file size, open files, processes) set before the code runs;
- a new empty network namespace where the kernel allows it, plus an audit hook that refuses sockets,
  process creation, signals, native code loading and writes outside the scratch directory;
- a temporary scratch directory as cwd, removed afterwards; an environment of only PATH and LANG;
- stdout/stderr truncated to `max_output_bytes` each.
"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

PRELUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prelude.py")
MAX_OUTPUT_BYTES = 64 * 1024
TRUNCATED = "\n[output truncated]"


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    returncode: int | None  # None if the process had to be killed on timeout; negative = killed by signal
    timed_out: bool
    duration: float  # wall-clock seconds


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


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _run(
    code: str,
    timeout: float,
    memory_mb: int,
    stdin: str,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
    fsize_mb: int = 16,
    nproc: int = 64,
    netns: bool = True,
    audit_hook: bool = True,
) -> SandboxResult:
    if timeout <= 0 or memory_mb <= 0:
        raise ValueError(f"run_python: timeout and memory_mb must be positive, got {timeout}, {memory_mb}")
    root = tempfile.mkdtemp(prefix="roll_sandbox_")
    try:
        scratch = os.path.join(root, "work")
        os.mkdir(scratch)
        code_path = os.path.join(root, "main.py")  # outside the scratch dir: the code cannot rewrite itself
        with open(code_path, "w", encoding="utf-8") as f:
            f.write(code)
        limits = {
            "memory_mb": memory_mb,
            "cpu_seconds": math.ceil(timeout) + 1,
            "fsize_mb": fsize_mb,
            "nproc": nproc,
            "netns": netns,
            "audit_hook": audit_hook,
        }
        env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": os.environ.get("LANG", "C.UTF-8")}
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", PRELUDE, code_path, scratch, json.dumps(limits)],
            cwd=scratch,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        out, err = [], []
        threads = [
            threading.Thread(target=_drain, args=(proc.stdout, out, max_output_bytes), daemon=True),
            threading.Thread(target=_drain, args=(proc.stderr, err, max_output_bytes), daemon=True),
            threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), daemon=True),
        ]
        for thread in threads:
            thread.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        # Kill the whole group also after a normal exit: leftover grandchildren would hold the pipes open.
        _kill_group(proc.pid)
        if proc.poll() is None:
            proc.kill()  # only if the group kill failed
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
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_python(code: str, *, timeout: float = 5.0, memory_mb: int = 512, stdin: str = "") -> SandboxResult:
    """Run `code` as a Python program in the sandbox and return what it printed. Never raises for the code's
    own failures (those show in returncode / stderr / timed_out)."""
    return _run(code, timeout=timeout, memory_mb=memory_mb, stdin=stdin)


_CAPABILITIES = None
_MB = 1024 * 1024
# Tries each layer from inside a sandboxed run and reports what held (the caller compares).
_PROBE = """
import json, os, resource, socket
report = {"pid": os.getpid(), "sid": os.getsid(0)}
try:
    report["netns"] = os.readlink("/proc/self/ns/net")
except OSError:
    report["netns"] = ""
report["limits"] = {name: resource.getrlimit(getattr(resource, name)) for name in NAMES}
try:
    hog = bytes(HOG_BYTES)  # calloc: no page is touched should the limit not hold
    report["memory_refused"] = False
except MemoryError:
    report["memory_refused"] = True
try:
    socket.socket().close()
    report["socket_refused"] = False
except PermissionError as error:
    report["socket_refused"] = str(error).startswith("sandbox:")
print(json.dumps(report))
"""
# With RLIMIT_NPROC = 1 any fork must fail (EAGAIN) unless the kernel ignores the limit (root).
_NPROC_PROBE = """
import os
try:
    pid = os.fork()
except OSError:
    print("refused")
else:
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("forked")
"""


def _probe(netns: bool = True, audit_hook: bool = True) -> dict:
    """Which layers hold, each tried for real from a sandboxed run with these layers requested."""
    try:
        parent_ns = os.readlink("/proc/self/ns/net")
    except OSError:
        parent_ns = None
    timeout, memory_mb = 10.0, 128
    expected = {
        "RLIMIT_AS": memory_mb * _MB,
        "RLIMIT_CPU": math.ceil(timeout) + 1,
        "RLIMIT_FSIZE": 16 * _MB,  # _run's default fsize_mb
        "RLIMIT_NOFILE": 64,
    }
    code = f"NAMES = {sorted(expected)!r}\nHOG_BYTES = {2 * memory_mb * _MB}\n" + _PROBE
    result = _run(code, timeout=timeout, memory_mb=memory_mb, stdin="", netns=netns, audit_hook=audit_hook)
    try:
        report = json.loads(result.stdout)
    except ValueError:
        report = None  # the probe itself did not run to its end: claim nothing
    if report is None or result.returncode != 0:
        return dict.fromkeys(("process_isolation", "netns", "audit_hook", "rlimits", "rlimit_nproc"), False)
    nproc = _run(_NPROC_PROBE, timeout=timeout, memory_mb=memory_mb, stdin="", nproc=1, netns=netns, audit_hook=False)
    return {
        # a separate process that leads its own session (the group the runner kills)
        "process_isolation": report["pid"] != os.getpid() and report["sid"] == report["pid"],
        "netns": bool(parent_ns and report["netns"] and report["netns"] != parent_ns),
        "audit_hook": report["socket_refused"],
        "rlimits": report["memory_refused"]
        and all(report["limits"][name] == [value, value] for name, value in expected.items()),
        # Linux ignores RLIMIT_NPROC for root (CAP_SYS_RESOURCE / CAP_SYS_ADMIN); fork is then refused only
        # by the audit hook.
        "rlimit_nproc": nproc.stdout.strip() == "refused",
    }


def capabilities() -> dict:
    """Which isolation layers hold on this machine: each one is tried from inside a sandboxed run (probed
    once per process): process_isolation (own process and session), netns (another network namespace),
    audit_hook (a socket is refused), rlimits (the limits are set and an allocation over memory_mb fails),
    rlimit_nproc (a fork over RLIMIT_NPROC fails)."""
    global _CAPABILITIES
    if _CAPABILITIES is None:
        _CAPABILITIES = _probe()
    return dict(_CAPABILITIES)
