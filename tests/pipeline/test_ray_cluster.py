"""Running on an existing multi-node Ray cluster (issue 16), simulated on one machine.

The scenarios run in one subprocess (tests/pipeline/ray_cluster_scenario.py) that starts a two-node
ray.cluster_utils.Cluster, exports RAY_ADDRESS, first attaches a pipeline that needs a device the cluster
lacks, then runs the tiny demo attached to it: this process's Ray session (if any) is untouched. The
subprocess gets a private RAY_TMPDIR, so nothing else on the machine
attaches to its cluster, and everything it started is ended afterwards, even when it fails or hangs.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.pipeline.helpers import REPO

SCENARIO_TIMEOUT = 420  # seconds; the run itself takes ~1 min on 2 idle cores


@pytest.fixture(scope="module")
def cluster_demo_dir(tmp_path_factory) -> Path:
    """The tiny demo's model and data (as tests/pipeline/conftest.py prepares them)."""
    from roll.demo.rlvr import DemoSettings, prepare_demo

    directory = tmp_path_factory.mktemp("cluster_demo")
    prepare_demo(directory, DemoSettings(warm_start_steps=40), log=lambda *_: None)
    return directory


@pytest.fixture(scope="module")
def scenarios(cluster_demo_dir, tmp_path_factory) -> tuple[dict, str, Path]:
    work = tmp_path_factory.mktemp("cluster")
    return (*run_scenarios(cluster_demo_dir, work), work)


def run_scenarios(demo_dir: Path, work: Path) -> tuple[dict, str]:
    """(the scenario's result file, its output). The driver runs in `work/run`, the nodes start in
    `work/node`."""
    run_dir, node_dir = work / "run", work / "node"
    run_dir.mkdir()
    node_dir.mkdir()
    result_file, log_file = work / "result.json", work / "scenario.log"
    ray_tmp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths must stay under 108 chars
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(
        RAY_TMPDIR=ray_tmp,
        PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        OMP_NUM_THREADS="1",
        RAY_AUTH_MODE="disabled",
    )
    command = [
        sys.executable,
        "-m",
        "tests.pipeline.ray_cluster_scenario",
        f"--demo_dir={demo_dir}",
        f"--node_dir={node_dir}",
        f"--result={result_file}",
    ]
    with open(log_file, "w") as log:
        process = subprocess.Popen(
            command, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            process.wait(timeout=SCENARIO_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        finally:
            _end_everything(process, ray_tmp)
            shutil.rmtree(ray_tmp, ignore_errors=True)
    output = log_file.read_text()
    assert result_file.is_file(), f"the scenario wrote no result (exit {process.returncode}):\n{output[-6000:]}"
    result = json.loads(result_file.read_text())
    assert "crash" not in result, f"{result['crash']}\n--- scenario output ---\n{output[-6000:]}"
    assert process.returncode == 0, f"exit {process.returncode}:\n{output[-6000:]}"
    return result, output


def _end_everything(process: subprocess.Popen, ray_tmp: str) -> None:
    """The scenario's process group, then any process it started that left the group (Ray's raylets, GCS
    and workers carry its private RAY_TMPDIR in their environment) — each by its id."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)  # lets the scenario's finally shut its cluster down
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    marker = f"RAY_TMPDIR={ray_tmp}".encode()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        leftovers = [pid for pid in _pids() if _has_env(pid, marker)]
        if not leftovers:
            return
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != os.getpid()]


def _has_env(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            return marker in file.read().split(b"\0")
    except OSError:
        return False


def test_the_demo_runs_attached_to_a_two_node_cluster(scenarios):
    result, output, tmp_path = scenarios
    head, (worker_node,) = result["nodes"]["head"], result["nodes"]["worker"]
    where = {(row["role"], row["rank"]): row for row in result["placements"]}
    train, infer, reference = where[("actor_train", 0)], where[("actor_infer", 0)], where[("reference", 0)]
    # device id d is on node d // num_gpus_per_node: device 0 on node 0 (the driver's), device 1 on node 1
    assert train["node_id"] == head and infer["node_id"] == worker_node
    assert train["node_id"] != infer["node_id"]
    assert reference["node_id"] == train["node_id"]  # colocated with actor_train on device 0: same node
    assert train["devices"] == [0] and infer["devices"] == [1]
    # start-up printed every worker's node and device
    assert "actor_infer[0]" in output and f"(id {worker_node[:8]})" in output and "device 1" in output

    # the weight sync went node to node through the collective group, at the nodes' addresses, and verified
    assert result["weight_sync_method"] == "collective"
    members = result["group_members"]
    assert [m["rank"] for m in members] == [0, 1]
    assert {m["host"] for m in members} == {train["node_ip"]} and train["node_ip"] != "127.0.0.1"
    assert [m["local_ip"] for m in members] == [train["node_ip"], infer["node_ip"]]
    assert sorted(result["steps"]) == ["0", "1", "2"]
    for step, metrics in result["steps"].items():
        assert metrics["weight_sync/size_mb"] > 0 and metrics["weight_sync/buckets"] >= 1, step
        assert 0 <= metrics["weight_sync/probe_max_abs_diff"] <= 1e-3, step

    # workers import roll from this checkout and work in the driver's directory, not where the nodes started
    run_dir = str(tmp_path / "run")
    for worker in result["workers"]:
        assert worker["roll"].startswith(str(REPO / "roll")), worker
        assert worker["cwd"] == run_dir == result["driver_cwd"], worker
    # so the relative output_dir is the driver's: the checkpoint's parts all landed in one place
    assert result["checkpoint"] == [
        "output/checkpoints/step-3/MANIFEST.json",  # written last (docs/reliability.md)
        "output/checkpoints/step-3/actor_train",
        "output/checkpoints/step-3/pipeline_state.pt",
    ]
    assert not (tmp_path / "node" / "output").exists()


def test_a_cluster_lacking_a_device_fails_before_any_worker_starts(scenarios):
    result = scenarios[0]["lacking"]
    assert result["error_type"] == "ClusterDevicesError"
    message = result["error"]
    assert "num_nodes=2 nodes with num_gpus_per_node=1 'roll_device'" in message
    assert "nodes with that many: 1 of 2" in message
    head, (worker_node,) = result["nodes"]["head"], result["nodes"]["worker"]
    assert f"(id {head[:8]}, head, driver): roll_device=1" in message
    assert f"(id {worker_node[:8]}): roll_device=0" in message and "missing 1" in message
    assert "--resources='{\"roll_device\": 1}'" in message
    assert result["clusters_started"] == []  # no role's workers were created
    assert result["placement_groups_after"] == 0  # and no device was reserved


def test_output_dir_probe_names_the_rank_that_cannot_see_or_write_it(tmp_path):
    from types import SimpleNamespace

    from roll.pipeline.core.checkpointing import probe_output_dir

    worker = SimpleNamespace()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".roll-shared-x").write_text("x")
    assert probe_output_dir(worker, str(tmp_path / "out"), ".roll-shared-x") is None
    # another node's directory of the same name: the driver's marker is not there
    other = probe_output_dir(worker, str(tmp_path / "elsewhere"), ".roll-shared-x")
    assert "does not see the file the driver just wrote there" in other and "on node" in other
    (tmp_path / "file").write_text("")
    unwritable = probe_output_dir(worker, str(tmp_path / "file" / "out"), ".roll-shared-x")
    assert "cannot write it" in unwritable


def test_a_worker_whose_devices_span_two_nodes_is_a_config_error(tmp_path):
    from roll.configs import ConfigError
    from tests.pipeline.helpers import make_config

    overrides = ["num_nodes=2", "num_gpus_per_node=2", "actor_infer.num_gpus_per_worker=2"]
    with pytest.raises(
        ConfigError, match=r"'actor_infer' rank 0 gets device ids \[1, 2\], which are on nodes \[0, 1\]"
    ):
        make_config(tmp_path, tmp_path / "out", [*overrides, "actor_infer.device_mapping=[1,2]"])
    config = make_config(tmp_path, tmp_path / "out", [*overrides, "actor_infer.device_mapping=[2,3]"])
    assert config.actor_infer.world_size == 1
