"""Hostile programs against the sandbox, one per attack class, each judged from OUTSIDE the sandbox:
processes left behind, files that appeared on the host, bytes a host listener received, secrets printed,
host processes killed. Every test also checks (autouse fixture) that no sandboxed process and no per-run
cgroup outlives its run. Host-global writes, the program's host uid, and this corpus re-run by an
unprivileged caller are in test_host_global.py."""

import glob
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest

from roll.sandbox import capabilities, run_python
from roll.sandbox.isolation import CGROUP_V1, cgroup_parent
from roll.sandbox.runner import _run


def _sandboxed_pids() -> list[int]:
    """Host PIDs of processes running a sandboxed program (their command line names /sandbox/main.py)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"/sandbox/main.py" in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def _run_cgroups() -> list[str]:
    found = []
    for hierarchy in ("memory", "pids", ""):
        parent = os.path.join(CGROUP_V1, hierarchy, cgroup_parent())
        if os.path.isdir(parent):
            found += [os.path.join(parent, d) for d in os.listdir(parent) if os.path.isdir(os.path.join(parent, d))]
    return found


@pytest.fixture(autouse=True)
def nothing_outlives_a_run():
    held = capabilities()
    assert all(held.values()), f"the sandbox's kernel layers must hold on this machine (CI included): {held}"
    before_pids, before_groups = set(_sandboxed_pids()), set(_run_cgroups())  # e.g. another session's runs
    yield
    deadline = time.monotonic() + 3
    while (set(_sandboxed_pids()) - before_pids or set(_run_cgroups()) - before_groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(_sandboxed_pids()) - before_pids == set(), "sandboxed processes outlived their run"
    assert set(_run_cgroups()) - before_groups == set(), "per-run cgroups were left behind"


def test_controls_get_the_right_verdicts():
    correct = run_python("print(sum(int(x) for x in input().split()))", stdin="2 3 4")
    assert (correct.stdout, correct.returncode, correct.timed_out) == ("9\n", 0, False)
    slow = run_python("import time\ntime.sleep(1.5)\nprint('done')", timeout=5)
    assert (slow.stdout, slow.returncode, slow.timed_out) == ("done\n", 0, False)
    wrong = run_python("print(sum(int(x) for x in input().split()) + 1)", stdin="2 3 4")
    assert wrong.stdout == "10\n" and wrong.returncode == 0


@pytest.mark.parametrize(
    "storm",
    [
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "import subprocess, sys\nwhile True:\n    try:\n        subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(60)'])\n    except OSError:\n        pass",
    ],
    ids=["fork", "spawn"],
)
def test_process_storms_are_capped_and_reaped(storm):
    result = _run(storm, timeout=2.0, memory_mb=256, stdin="", nproc=16)
    assert result.timed_out
    after = run_python("print('host still forks')")
    assert after.stdout == "host still forks\n", after


def test_memory_split_across_children_hits_one_cap():
    # 6 children × 100 MB touched pages, each under its own 256 MB address-space limit, 600 MB in all:
    # only the sandbox-wide cgroup cap (256 MB) can stop this.
    code = (
        "import os, time\n"
        "for _ in range(6):\n"
        "    if os.fork() == 0:\n"
        "        block = b'x' * (100 * 1024 * 1024)\n"
        "        time.sleep(3)\n"
        "        print('held for 3 s', flush=True)\n"
        "        os._exit(0)\n"
        "for _ in range(6):\n"
        "    os.wait()\n"
    )
    result = _run(code, timeout=8.0, memory_mb=256, stdin="")
    # children allocate within a fraction of a second, then hold: those that print all held at once
    assert result.stdout.count("held for 3 s") <= 2, result.stdout
    assert result.memory_exceeded


def test_infinite_loop_and_sleep_time_out():
    for code in ("while True:\n    pass", "import time\ntime.sleep(3600)"):
        start = time.monotonic()
        result = run_python(code, timeout=1.0)
        assert result.timed_out and result.returncode is None
        assert time.monotonic() - start < 3.0


def test_output_flood_is_truncated():
    result = run_python("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", timeout=2.0)
    assert len(result.stdout) < 70 * 1024 and result.stdout.endswith("[output truncated]")


def test_writes_outside_the_scratch_reach_nothing_on_the_host(tmp_path):
    mark = f"roll-escape-{uuid.uuid4().hex}"
    targets = [f"/root/{mark}", f"/tmp/{mark}", f"/dev/shm/{mark}", str(tmp_path / mark), f"/{mark}"]
    code = (
        "import os\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('pwned')\n"
        "    except OSError as error:\n"
        "        print('refused', path, error.errno)\n"
        "for where in ('/', '/usr/lib', '/sandbox'):\n"
        "    try:\n"
        "        fd = os.open(where, os.O_RDONLY)\n"
        f"        os.close(os.open({mark!r}, os.O_CREAT | os.O_WRONLY, dir_fd=fd))\n"
        "        print('wrote via dir_fd into', where)\n"
        "    except OSError as error:\n"
        "        print('refused dir_fd', where, error.errno)\n"
        "open('/sandbox/main.py', 'a').write('#')\n"
    )
    result = run_python(code)
    for path in targets + [f"/usr/lib/{mark}"]:
        assert not os.path.exists(path), f"{path} appeared on the host"
    assert "wrote via dir_fd" not in result.stdout
    # the program's own file is read-only too (mode 0444 on a read-only tmpfs)
    assert "PermissionError" in result.stderr or "Read-only file system" in result.stderr, result.stderr


def test_host_files_and_secrets_stay_unread(tmp_path, monkeypatch):
    secret = f"roll-secret-{uuid.uuid4().hex}"
    (tmp_path / "secret.txt").write_text(secret)
    monkeypatch.setenv("ROLL_TEST_SECRET", secret)
    victim = subprocess.Popen(["sleep", "30"], env={**os.environ, "VICTIM_SECRET": secret})
    try:
        code = (
            "import os\n"
            f"paths = [{str(tmp_path / 'secret.txt')!r}, '/etc/shadow', '/etc/passwd', '/root/.bash_history',\n"
            f"         '/proc/{victim.pid}/environ', '/proc/{os.getpid()}/environ', '/proc/{os.getpid()}/cmdline']\n"
            "paths += [f'/proc/{p}/environ' for p in os.listdir('/proc') if p.isdigit()]\n"
            "for path in paths:\n"
            "    try:\n"
            "        print(path, open(path, 'rb').read()[:4096])\n"
            "    except OSError as error:\n"
            "        print('unreadable', path, error.errno)\n"
            "print(dict(os.environ))\n"
            "print('pids', *[p for p in os.listdir('/proc') if p.isdigit()])\n"
        )
        result = run_python(code)
        assert secret not in result.stdout + result.stderr
        assert result.returncode == 0
        pids = [int(p) for p in result.stdout.split("pids ", 1)[1].split()]
        assert max(pids) < 50, pids  # only the sandbox's own PID namespace is visible
    finally:
        victim.kill()
        victim.wait()


@pytest.fixture
def host_listeners(tmp_path):
    """A TCP listener on all interfaces, a UDP socket, a Unix socket file and an abstract Unix socket; each
    records what it receives."""
    received = []
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("0.0.0.0", 0))
    tcp.listen(8)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", 0))
    unix_path = str(tmp_path / "host.sock")
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(unix_path)
    unix.listen(8)
    abstract_name = f"roll-abstract-{uuid.uuid4().hex}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + abstract_name)
    abstract.listen(8)
    stop = threading.Event()

    def watch(sock, kind):
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                if kind == "udp":
                    received.append(("udp", sock.recvfrom(4096)[0]))
                else:
                    conn, _ = sock.accept()
                    received.append((kind, conn.recv(4096)))
                    conn.close()
            except (TimeoutError, OSError):
                pass

    threads = [
        threading.Thread(target=watch, args=(s, k), daemon=True)
        for s, k in ((tcp, "tcp"), (udp, "udp"), (unix, "unix"), (abstract, "abstract"))
    ]
    for t in threads:
        t.start()
    yield {
        "tcp": tcp.getsockname()[1],
        "udp": udp.getsockname()[1],
        "unix": unix_path,
        "abstract": abstract_name,
        "received": received,
    }
    stop.set()
    for t in threads:
        t.join()
    for s in (tcp, udp, unix, abstract):
        s.close()


def test_network_is_unreachable(host_listeners):
    ports = host_listeners
    host_ip = socket.gethostbyname(socket.gethostname())
    code = (
        "import socket\n"
        "def attempt(name, fn):\n"
        "    try:\n"
        "        fn()\n"
        "        print('REACHED', name)\n"
        "    except OSError as error:\n"
        "        print('blocked', name, error.errno)\n"
        f"for host in ('127.0.0.1', {host_ip!r}):\n"
        f"    attempt('tcp ' + host, lambda: socket.create_connection((host, {ports['tcp']}), timeout=1).send(b'hi'))\n"
        f"    attempt('udp ' + host, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hi', "
        f"(host, {ports['udp']})))\n"
        "attempt('dns', lambda: socket.getaddrinfo('example.com', 80))\n"
        "def unix(address):\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    s.connect(address)\n"
        "    s.send(b'hi')\n"
        f"attempt('unix', lambda: unix({ports['unix']!r}))\n"
        f"attempt('abstract', lambda: unix('\\0' + {ports['abstract']!r}))\n"
        "attempt('raw', lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))\n"
        "attempt('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW))\n"
    )
    result = run_python(code, timeout=5.0)
    time.sleep(0.3)  # let the listeners see anything in flight
    assert ports["received"] == [], ports["received"]
    assert result.stdout.count("blocked") == 9, result.stdout + result.stderr


def test_other_processes_cannot_be_signalled():
    victim = subprocess.Popen(["sleep", "30"])
    try:
        code = (
            "import os, signal\n"
            f"for pid in ({victim.pid}, {os.getpid()}, os.getppid()):\n"
            "    try:\n"
            "        os.kill(pid, signal.SIGKILL)\n"
            "    except OSError as error:\n"
            "        print('refused', pid, error.errno)\n"
            "try:\n"
            f"    os.pidfd_open({victim.pid})\n"
            "except OSError as error:\n"
            "    print('pidfd refused', error.errno)\n"
            "os.kill(-1, signal.SIGKILL)\n"  # every process this one may signal: inside its namespace only
        )
        run_python(code)
        time.sleep(0.2)
        assert victim.poll() is None, "a host process was killed from the sandbox"
    finally:
        victim.kill()
        victim.wait()


def test_setsid_double_fork_does_not_outlive_the_run(tmp_path):
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(30)\n"
        "    os._exit(0)\n"
        "print('parent exits', flush=True)\n"
    )
    result = run_python(code, timeout=3.0)
    assert result.stdout == "parent exits\n" and not result.timed_out
    # the autouse fixture asserts that no /sandbox/main.py process remains


def test_fd_and_disk_exhaustion_are_bounded():
    fds = run_python("import os\nfds = []\nwhile True:\n    fds.append(os.open('/dev/null', os.O_RDONLY))")
    assert "Too many open files" in fds.stderr and not fds.timed_out
    disk = run_python(
        "import os\nf = open('fill', 'wb')\nwhile True:\n    f.write(b'x' * 1024 * 1024)\n    f.flush()",
        timeout=10.0,
    )
    assert not disk.timed_out and ("No space left" in disk.stderr or "File too large" in disk.stderr), disk.stderr


def test_native_code_gets_no_further(tmp_path, host_listeners):
    mark = tmp_path / f"native-{uuid.uuid4().hex}"
    victim = subprocess.Popen(["sleep", "30"])
    try:
        code = (
            "import ctypes, os, socket\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def call(name, *args):\n"
            "    r = getattr(libc, name)(*args)\n"
            "    print(name, r, ctypes.get_errno())\n"
            f"call('open', {str(mark).encode()!r}, os.O_CREAT | os.O_WRONLY, 0o644)\n"
            f"call('kill', {victim.pid}, 9)\n"
            "call('ptrace', 16, 1, 0, 0)\n"  # PTRACE_ATTACH to the sandbox's own PID 1
            "call('unshare', 0x10000000)\n"  # CLONE_NEWUSER
            "call('mount', b'none', b'/work', b'tmpfs', 0, None)\n"
            "call('syscall', 434, 1, 0)\n"  # pidfd_open
            "call('socket', socket.AF_INET, socket.SOCK_STREAM, 0)\n"
            "call('setuid', 0)\n"
        )
        result = run_python(code)
        assert result.returncode == 0, result.stderr
        lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
        assert all(value.split()[0] == "-1" for value in lines.values()), result.stdout
        time.sleep(0.2)
        assert not mark.exists() and victim.poll() is None and host_listeners["received"] == []
    finally:
        victim.kill()
        victim.wait()


def test_answer_then_hang_times_out_with_its_answer():
    result = run_python("print(42, flush=True)\nimport time\ntime.sleep(3600)", timeout=1.0)
    assert result.timed_out and result.stdout == "42\n"


def test_no_capabilities_inside():
    result = run_python(
        "print(open('/proc/self/status').read())\nimport os\nprint('uid', os.getuid(), os.getgid())",
    )
    status = dict(line.split(":\t", 1) for line in result.stdout.splitlines() if ":\t" in line)
    assert int(status["CapEff"].strip(), 16) == 0 and int(status["CapBnd"].strip(), 16) == 0
    assert status["Seccomp"].strip() == "2" and "uid 65534 65534" in result.stdout


PROC_DUMP = """
import os
def show(path, read):
    try:
        print(path, read(path))
    except OSError as error:
        print('unreadable', path, error.errno)
pids = [p for p in os.listdir('/proc') if p.isdigit()]
print('pids', *pids)
for pid in [*pids, 'self', 'thread-self']:
    for name in ('cmdline', 'environ', 'maps', 'mountinfo', 'mounts', 'cgroup', 'status', 'stat', 'comm'):
        show(f'/proc/{pid}/{name}', lambda path: open(path, 'rb').read().replace(bytes(1), b' ').decode())
    for name in ('exe', 'cwd', 'root'):
        show(f'/proc/{pid}/{name}', os.readlink)
    for fd in sorted(os.listdir(f'/proc/{pid}/fd')) if pid in ('1', 'self') else ():
        show(f'/proc/{pid}/fd/{fd}', os.readlink)
print('environ', dict(os.environ))
"""


def test_proc_inside_names_no_host_path(monkeypatch):
    """Everything the program can read under /proc (every process it sees, itself included): none of the caller's
    environment, the run's cgroups, temp files, roll's source tree, the venv or the bubblewrap binary. Only the
    program itself is there, as PID 1 (the interpreter and system libraries are bound at their own paths)."""
    import roll
    from roll.sandbox.isolation import bwrap_binary

    secret = f"roll-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("ROLL_TEST_SECRET", secret)
    result = run_python(PROC_DUMP, timeout=10)
    assert result.returncode == 0, result.stderr
    seen = result.stdout + result.stderr
    assert seen.splitlines()[0] == "pids 1", seen.splitlines()[0]  # bubblewrap is not in the sandbox
    host = {
        "the caller's environment": secret,
        "the cgroups' parent": cgroup_parent(),
        "the cgroup filesystem": CGROUP_V1,
        "the caller's pid in a cgroup name": f"/{os.getpid()}-",
        "a temp directory of the run": "roll_sandbox_",
        "a seccomp file": "roll_seccomp_",
        "roll's source tree": os.path.dirname(os.path.dirname(os.path.abspath(roll.__file__))),
        "the bubblewrap binary": os.path.dirname(bwrap_binary()),
    }
    if sys.prefix != sys.base_prefix:
        host["the virtualenv"] = sys.prefix
    leaked = {what: text for what, text in host.items() if text in seen}
    assert leaked == {}, f"/proc inside the sandbox shows host paths: {leaked}\n{seen[:3000]}"
    assert "LANG=C.UTF-8" in seen and "/sandbox/main.py" in seen  # the dump did read PID 1's environ and argv


def test_the_caller_can_be_killed_mid_run_without_leftovers():
    # A Ray worker that dies mid-grading must not leave the sandbox running: bubblewrap dies with its parent.
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = (
        f"import sys; sys.path.insert(0, {repo!r})\n"
        "from roll.sandbox import run_python\n"
        "run_python('import time\\ntime.sleep(60)', timeout=60)\n"
    )
    before_pids = set(_sandboxed_pids())
    before_files = set(glob.glob(os.path.join(tempfile.gettempdir(), "roll_*")))
    caller = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while not set(_sandboxed_pids()) - before_pids and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(_sandboxed_pids()) - before_pids, "the sandboxed program never started"
    os.killpg(caller.pid, signal.SIGKILL)
    caller.wait()
    deadline = time.monotonic() + 5
    while set(_sandboxed_pids()) - before_pids and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(_sandboxed_pids()) - before_pids == set()
    # its cgroups are removed by the run's watcher; it wrote no file (source, prelude, filter came from memory)
    mine = f"{caller.pid}-"
    while any(os.path.basename(g).startswith(mine) for g in _run_cgroups()) and time.monotonic() < deadline + 3:
        time.sleep(0.05)
    assert [g for g in _run_cgroups() if os.path.basename(g).startswith(mine)] == []
    new_files = set(glob.glob(os.path.join(tempfile.gettempdir(), "roll_*"))) - before_files
    assert not {f for f in new_files if f.startswith(os.path.join(tempfile.gettempdir(), "roll_s"))}, new_files
