"""Runs inside the sandbox child, before the user's code: network namespace, rlimits, audit hook.

Started as `python -I -S -B prelude.py CODE_FILE SCRATCH_DIR LIMITS_JSON`. Limits are applied here rather
than in a `preexec_fn`, because preexec_fn can deadlock when the caller has threads (Ray workers do).
"""

import json
import linecache
import os
import resource
import sys
import traceback

code_path, scratch, limits = sys.argv[1], os.path.realpath(sys.argv[2]), json.loads(sys.argv[3])


def unshare_network() -> None:
    """A new, empty network namespace (only a down loopback). Needs root or user namespaces; best effort."""
    try:
        if hasattr(os, "unshare"):  # Python 3.12+
            os.unshare(os.CLONE_NEWNET)
        else:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            try:
                if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
                    raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
            finally:  # forget ctypes so the user's `import ctypes` goes through the audit hook
                for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
                    del sys.modules[name]
    except (OSError, AttributeError):
        pass  # reported by runner.capabilities(); the audit hook below still blocks sockets


def set_limits() -> None:
    mb = 1024 * 1024
    for name, value in (
        ("RLIMIT_AS", limits["memory_mb"] * mb),
        ("RLIMIT_CPU", limits["cpu_seconds"]),
        ("RLIMIT_FSIZE", limits["fsize_mb"] * mb),
        ("RLIMIT_NOFILE", 64),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NPROC", limits["nproc"]),
    ):
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            pass  # e.g. NPROC below the user's current process count; other limits still apply


# Audit events that would reach the network, start processes, signal other processes, load native code
# or change the limits above. The audit hook is defence in depth, not a boundary on its own.
BLOCKED_PREFIXES = ("socket.",)
BLOCKED = {
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "subprocess.Popen",
    "pty.spawn",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.dlsym/handle",
    "resource.setrlimit",
    "resource.prlimit",
    "os.setns",
    "os.unshare",
    "sys.addaudithook",
    "os.chroot",
    "os.mknod",
    "os.mkfifo",
    "urllib.Request",
    "ftplib.connect",
    "smtplib.connect",
    "http.client.connect",
    "webbrowser.open",
}
PATH_EVENTS = {
    "os.remove": 1,
    "os.rmdir": 1,
    "os.mkdir": 1,
    "os.chmod": 1,
    "os.chown": 1,
    "os.truncate": 1,
    "os.utime": 1,
    "os.rename": 2,
    "os.link": 2,
    "os.symlink": 2,
    "shutil.rmtree": 1,
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def inside_scratch(path) -> bool:
    if isinstance(path, int):
        return True  # an already-open descriptor; opening it was checked
    path = os.fsdecode(path)
    return os.path.realpath(path) == scratch or os.path.realpath(path).startswith(scratch + os.sep)


BLOCKED_MODULES = {"ctypes", "_ctypes"}  # calling libc directly would bypass every check here


def audit(event, args):
    if event in BLOCKED or event.startswith(BLOCKED_PREFIXES):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "import" and args[0].partition(".")[0] in BLOCKED_MODULES:
        raise PermissionError(f"sandbox: importing {args[0]} is not allowed")
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(ch in mode for ch in "wax+")) or bool((flags or 0) & WRITE_FLAGS)
        if writes and path is not None and not inside_scratch(path):
            raise PermissionError(f"sandbox: writing outside the scratch directory is not allowed: {path!r}")
    elif event in PATH_EVENTS:
        for path in args[: PATH_EVENTS[event]]:
            if path is not None and not inside_scratch(path):
                raise PermissionError(f"sandbox: {event} outside the scratch directory is not allowed: {path!r}")


def main() -> None:
    if limits["netns"]:
        unshare_network()
    set_limits()
    with open(code_path, encoding="utf-8") as f:
        source = f.read()
    code = compile(source, "<sandbox>", "exec")
    linecache.cache["<sandbox>"] = (len(source), None, source.splitlines(True), "<sandbox>")  # source in tracebacks
    sys.argv = ["<sandbox>"]
    if limits["audit_hook"]:
        sys.addaudithook(audit)
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit:
        raise
    except BaseException as error:  # print the traceback without this prelude's frame
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        sys.exit(1)


main()
