"""Runs between a root caller and bubblewrap: gives up root on the host before any namespace exists.

Started as `python -I -S -B launch.py SPEC_JSON BWRAP ARGS...` (standard library only). SPEC is
{"uid", "gid", "tmpfs": [dir, ...], "stage": [[source, target], ...]}. Run by root,
bubblewrap would map the sandbox's uid onto host uid 0, and uid-checked host files (/proc/sys sysctls among
them) would take its writes. So this process, still root:
1. where the unprivileged uid cannot reach a path bubblewrap needs (a Python under /root, mode 0700): makes
   a private mount namespace, covers each `tmpfs` dir (the blocking one, e.g. /root) with an empty tmpfs
   (mode 0755) and binds each `source` back at `target` (its own path) inside it. Nothing of it is visible
   on the host, and it all goes when the sandbox ends;
2. drops to `uid`/`gid` for good (no supplementary groups, no capabilities, no_new_privs, so not even a
   setuid binary gives root back);
3. execs bubblewrap, which then runs setuid-less and maps the sandbox's uid onto `uid`.
Any failure exits 125 with one line on stderr saying what failed.
"""

import ctypes
import json
import os
import sys

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
PR_SET_NO_NEW_PRIVS = 38


def fail(what: str) -> None:
    sys.stderr.write(f"roll sandbox launcher: {what}\n")
    sys.exit(125)


def main() -> None:
    spec, argv = json.loads(sys.argv[1]), sys.argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)

    def call(result: int, what: str) -> None:
        if result != 0:
            fail(f"{what}: {os.strerror(ctypes.get_errno())}")

    if spec["stage"]:
        call(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS) (root without CAP_SYS_ADMIN?)")
        call(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making the mounts private")
        # opened before any tmpfs can hide them; bound through /proc/self/fd (same mount namespace)
        sources = [(os.open(source, os.O_PATH), source, target) for source, target in spec["stage"]]
        for cover in spec["tmpfs"]:
            options = b"mode=0755,size=64k"
            call(libc.mount(b"tmpfs", cover.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), f"tmpfs on {cover}")
        for fd, source, target in sources:
            os.makedirs(target, 0o755, exist_ok=True)
            via = f"/proc/self/fd/{fd}".encode()
            call(libc.mount(via, target.encode(), None, MS_BIND | MS_REC, None), f"binding {source} at {target}")
            os.close(fd)
    uid, gid = spec["uid"], spec["gid"]
    if uid == 0 or gid == 0:
        fail("refusing to run the sandbox as host uid/gid 0")
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as error:
        fail(f"cannot drop to uid {uid} gid {gid}: {error}")
    call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    ids = status["Uid"].split() + status["Gid"].split()
    if ids != [str(uid)] * 4 + [str(gid)] * 4 or int(status["CapEff"], 16) or int(status["CapPrm"], 16):
        fail(f"still privileged after dropping to {uid}: Uid {status['Uid'].strip()}, CapEff {status['CapEff']}")
    os.execv(argv[0], argv)


main()
