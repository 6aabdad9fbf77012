"""Two runs sharing one four-node Ray cluster take different nodes, and a run that must wait for devices
says so (issue 31). The scenario (tests/distributed/shared_cluster_scenario.py) reserves placement groups
only, in a subprocess with a private RAY_TMPDIR whose processes are all ended afterwards (~20 s)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.pipeline.test_ray_cluster import _end_everything

REPO = Path(__file__).resolve().parents[2]


def test_a_second_run_takes_the_idle_nodes_and_a_waiting_run_says_what_it_waits_for(tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths must stay under 108 chars
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=ray_tmp, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", RAY_AUTH_MODE="disabled")
    result_file = tmp_path / "result.json"
    command = [sys.executable, "-m", "tests.distributed.shared_cluster_scenario", str(result_file)]
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output = process.communicate(timeout=240)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        output = "(timed out)"
    finally:
        _end_everything(process, ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result_file.is_file(), output[-5000:]
    result = json.loads(result_file.read_text())
    assert "second" in result, f"{result}\n{output[-5000:]}"
    first, second = result["first"], result["second"]
    assert first[0] == result["head"]  # node 0: the driver's node, as in ROLL's numbering
    assert len(set(first + second)) == 4  # four different nodes: the second run did not queue behind the first
    waiting = [line for line in result["log"] if line.startswith("waiting for devices")]
    assert waiting, result["log"]
    assert "1 node(s) with 1 free roll_device each are needed" in waiting[0]
    assert "has 0 of 1 free" in waiting[0] and "another pipeline or job holds them" in waiting[0]
    assert "could not reserve 1 roll_device" in result["third_error"]
