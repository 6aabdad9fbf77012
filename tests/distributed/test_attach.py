"""Attaching to a Ray cluster (issue 31): an address where no Ray answers fails in seconds naming the address
and the cause, and docs/cluster.md's `ray start` steps work as written on a Ray 2.60 with token
authentication, whose attach without the token mode names the cause (never `ray stop`).

Each driver runs in a subprocess (Ray must not be initialised in it); the cluster of the token test is started
with `ray start` under a private HOME (its ~/.ray/auth_token) and RAY_TMPDIR, and ended by process id.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from roll.distributed.attach import ClusterAttachError, check_cluster_address, split_address

REPO = Path(__file__).resolve().parents[2]
ATTACH = (
    "import sys, time\n"
    "from roll.distributed.ray_utils import init_ray\n"
    "start = time.monotonic()\n"
    "try:\n"
    "    init_ray(num_devices=int(sys.argv[1]), num_nodes=int(sys.argv[2]))\n"
    "    print('ATTACHED', flush=True)\n"
    "except Exception as error:\n"
    "    print(f'FAILED after {time.monotonic() - start:.1f} s: {type(error).__name__}: {error}', flush=True)\n"
)


def attach(env: dict, devices: int = 1, nodes: int = 1, timeout: float = 90) -> str:
    result = subprocess.run(
        [sys.executable, "-c", ATTACH, str(devices), str(nodes)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return result.stdout


def driver_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **extra)
    return env


def test_split_address():
    assert split_address("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert split_address("[::1]:6379") == ("::1", 6379)
    assert split_address("ray://10.0.0.1:10001") is None and split_address("10.0.0.1") is None


def test_nothing_listening_fails_in_seconds_naming_the_address_and_cause():
    """RAY_ADDRESS=127.0.0.1:1 made ray.init retry for over 500 s with only Ray's warnings."""
    start = time.monotonic()
    out = attach(driver_env(RAY_ADDRESS="127.0.0.1:1"), timeout=60)
    assert "FAILED" in out and "ClusterAttachError" in out, out
    assert "'127.0.0.1:1' (from RAY_ADDRESS)" in out and "connection refused" in out, out
    assert "unset RAY_ADDRESS" in out and "ray stop" not in out, out
    assert time.monotonic() - start < 30


def test_a_host_that_does_not_resolve_and_a_non_address_are_named():
    with pytest.raises(ClusterAttachError, match="'no-such-host.invalid' does not resolve"):
        check_cluster_address("no-such-host.invalid:6379", from_env=True, timeout=5)
    with pytest.raises(ClusterAttachError, match="not an address; give HOST:PORT"):
        check_cluster_address("10.0.0.1", from_env=True)


def test_a_port_that_is_not_rays_is_named_within_the_timeout():
    """A listening socket that never speaks Ray's protocol (e.g. the dashboard's port given by mistake)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(ClusterAttachError, match="the port answers but no Ray GCS replied within 3 s"):
            check_cluster_address(address, from_env=False, timeout=3)
        assert time.monotonic() - start < 10


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ray(env: dict, *args: str) -> None:
    ray = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    done = subprocess.run([ray, *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"ray {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _end_processes_of(ray_tmp: str) -> None:
    """Every process of this test's cluster (they carry its private RAY_TMPDIR), by id."""
    marker = f"RAY_TMPDIR={ray_tmp}".encode()
    for _ in range(20):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as file:
                    if marker not in file.read().split(b"\0"):
                        continue
                os.kill(int(name), signal.SIGKILL)
                found = True
            except (OSError, ProcessLookupError):
                pass
        if not found:
            return
        time.sleep(0.5)


def test_token_authentication_cluster_started_as_docs_say(tmp_path):
    """docs/cluster.md with token authentication: `ray get-auth-token --generate`, then `ray start` on the
    head and a second node with RAY_AUTH_MODE=token; a driver without the mode is told the cause, one with it
    attaches to both nodes."""
    ray_tmp = tempfile.mkdtemp(prefix="ra", dir="/tmp")  # short: Ray's socket paths must stay under 108 chars
    home = tmp_path / "home"
    home.mkdir()
    env = driver_env(HOME=str(home), RAY_TMPDIR=ray_tmp)
    node_env = {**env, "RAY_AUTH_MODE": "token"}
    port = _free_port()
    quiet = ["--num-cpus=1", "--disable-usage-stats", "--dashboard-agent-listen-port=0", "--metrics-export-port=0"]
    try:
        _ray(env, "get-auth-token", "--generate")
        assert (home / ".ray" / "auth_token").is_file()
        _ray(node_env, "start", "--head", f"--port={port}", "--include-dashboard=false", *quiet,
             "--resources={\"roll_device\": 1}")  # fmt: skip
        _ray(node_env, "start", f"--address=127.0.0.1:{port}", *quiet, '--resources={"roll_device": 1}')

        start = time.monotonic()
        out = attach({**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}, devices=2, nodes=2)
        assert (
            "FAILED" in out
            and "token authentication" in out
            and "RAY_AUTH_MODE=disabled (roll's default where it is unset)" in out
        ), out
        assert "export RAY_AUTH_MODE=token" in out and "ray stop" not in out, out
        assert time.monotonic() - start < 30

        out = attach({**node_env, "RAY_ADDRESS": f"127.0.0.1:{port}"}, devices=2, nodes=2)
        assert "ATTACHED" in out, out
    finally:
        _end_processes_of(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
