"""benchmarks/gpu_scale.py at a tiny shape on CPU (the code a GPU run uses: model build, the colocated demo
config, the sampler, the per-phase and token figures), two steps in the session's Ray."""

import importlib.util
import json

from tests.pipeline.helpers import REPO


def _benchmark():
    spec = importlib.util.spec_from_file_location("gpu_scale", REPO / "benchmarks" / "gpu_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_scale_runs_at_a_tiny_shape_on_cpu(ray_session, tmp_path, capsys):
    bench = _benchmark()
    work = tmp_path / "work"
    result = bench.main(["--tiny", "--steps", "2", "--output_dir", str(work), "--json", str(tmp_path / "out.json")])
    printed = capsys.readouterr().out

    config = json.loads((work / "model" / "config.json").read_text())
    tiny = bench.TINY
    assert (config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"]) == (64, 2, 256)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (tiny["heads"], tiny["kv_heads"])
    assert json.loads((tmp_path / "out.json").read_text()) == result
    assert result["device"] == "cpu" and [s["step"] for s in result["steps"]] == [1, 2]
    rows = tiny["prompts"] * tiny["group"]
    for step in result["steps"]:
        assert {"generate", "ref_log_probs", "train", "weight_sync"} <= set(step["phases"])
        # float32 hf_infer: the old log-probs are measured equal to the rollout ones on step 1, then reused
        assert ("old_log_probs" in step["phases"]) == (step["step"] == 1)
        assert 0 < step["response_tokens"] <= rows * tiny["response_length"]
        assert step["train_tokens"] > step["response_tokens"]  # prompts are trained on as context
        assert step["seconds"] >= sum(step["phases"].values()) - step["overlap"]  # overlapped phases count once
    # the summary averages the steps after the first
    assert result["seconds_per_step"] == result["steps"][1]["seconds"]
    assert result["utilisation_mean"] is not None and result["peak_memory_mib"] > 0  # the sampler ran
    assert "seconds per step" in printed and "rollout tokens/s" in printed and "training tokens/s" in printed
