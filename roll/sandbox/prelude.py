"""Runs first inside the sandbox, before the untrusted code: sets the per-process limits, then runs it.

Started as `python -I -S -B prelude.py CODE_FILE LIMITS_JSON`. The boundary is the kernel's (namespaces,
seccomp, cgroup: see isolation.py); these rlimits only bound each process on its own (CPU seconds, file
size, open files, address space, processes of the sandbox's user). Without capabilities the code cannot
raise them again. Setting them here rather than in a `preexec_fn` keeps the caller thread-safe (Ray
workers have threads, and preexec_fn can deadlock there).
"""

import json
import linecache
import resource
import sys
import traceback

code_path, limits = sys.argv[1], json.loads(sys.argv[2])


def set_limits() -> None:
    mb = 1024 * 1024
    for name, value in (
        ("RLIMIT_AS", limits["memory_mb"] * mb),
        ("RLIMIT_CPU", limits["cpu_seconds"]),
        ("RLIMIT_FSIZE", limits["fsize_mb"] * mb),
        ("RLIMIT_NOFILE", limits["max_open_files"]),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NPROC", limits["nproc"]),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))


def main() -> None:
    set_limits()
    with open(code_path, encoding="utf-8") as f:
        source = f.read()
    code = compile(source, "<sandbox>", "exec")
    linecache.cache["<sandbox>"] = (len(source), None, source.splitlines(True), "<sandbox>")  # source in tracebacks
    sys.argv = ["<sandbox>"]
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit:
        raise
    except BaseException as error:  # print the traceback without this prelude's frame
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        sys.exit(1)


main()
