"""offload() / reload() of every train strategy on one GPU: the state leaves the GPU and comes back, and the next
optimizer step equals the one without the round trip (tests/gpu/offload_child.py runs the engines)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.conftest import requires_cuda
from tests.gpu.offload_child import SCENARIOS

pytestmark = [pytest.mark.gpu, requires_cuda]
REPO = Path(__file__).resolve().parents[2]
SAME_RUN_ATOL = 1e-5  # two runs of the same kernels on one GPU; atomics in backward may reorder sums


@pytest.fixture(scope="module")
def offload_results(tmp_path_factory) -> dict:
    workdir = tmp_path_factory.mktemp("offload")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    run = subprocess.run(
        [sys.executable, "-m", "tests.gpu.offload_child", str(workdir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = workdir / "results.json"
    assert run.returncode == 0 and out.exists(), f"offload child failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_offload_frees_the_gpu_and_reload_restores_the_same_training(name, offload_results):
    result = offload_results[name]
    if "skipped" in result:
        pytest.skip(result["skipped"])
    assert "error" not in result, result.get("error")
    state = result["weights"] + result["moments"]  # at least this much lives on the GPU after a step
    freed, restored = result["before"] - result["offloaded"], result["reloaded"] - result["offloaded"]
    assert freed >= 0.9 * state, f"offload freed {freed} B, the weights and Adam moments are {state} B: {result}"
    assert restored >= 0.9 * state, f"reload brought back {restored} B of {state} B: {result}"
    for key in ("actor/pg_loss", "grad_norm"):
        assert result["second_round_trip"][key] == pytest.approx(result["second_plain"][key], abs=SAME_RUN_ATOL)
    assert result["max_param_diff"] <= SAME_RUN_ATOL
