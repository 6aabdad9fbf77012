"""benchmarks/gpu_vs_trl.py --tiny on CPU: the code a GPU run uses (the model build, roll's colocated demo
config and TRL's GRPOTrainer each in a child process, TRL's phase clock, the summary and the ratios), two steps
per side. TRL comes with the `test` extra."""

import importlib.util
import json

from tests.pipeline.helpers import REPO


def _benchmark():
    spec = importlib.util.spec_from_file_location("gpu_vs_trl", REPO / "benchmarks" / "gpu_vs_trl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_vs_trl_runs_both_sides_at_a_tiny_shape_on_cpu(tmp_path, capsys):
    bench = _benchmark()
    out = tmp_path / "out.json"
    result = bench.main(["--tiny", "--work_dir", str(tmp_path / "work"), "--json", str(out), "--label", "tiny"])
    printed = capsys.readouterr().out

    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["device"].startswith("CPU") and set(result["sides"]) == {"roll", "trl"}
    rows, length = bench.TINY["prompts"] * bench.TINY["group"], bench.TINY["response_length"]
    roll, trl = result["sides"]["roll"], result["sides"]["trl"]
    for side in (roll, trl):
        assert len(side["step_seconds"]) == 2 and side["s_per_step"] == side["step_seconds"][1]
        assert 0 < side["response_tokens_per_step"] <= rows * length
        assert side["rollout_tokens_per_s"] > 0 and side["train_tokens_per_s"] > 0
        assert side["startup_process"] > side["startup_in_process"] > 0
        assert side["gpu_utilisation_mean"] is None and side["gpu_memory_peak_mib"] is None  # no GPU: n/a
    # roll's phases are its timing metrics; TRL's come from the clock around its methods, every one of them ran
    assert {"generate", "reward", "ref_log_probs", "train", "weight_sync"} <= set(roll["phases"])
    assert {"generate", "reward", "old_log_probs", "ref_log_probs", "other", "train"} == set(trl["phases"])
    assert all(v >= 0 for v in trl["phases"].values()) and trl["phases"]["generate"] > 0
    # TRL's step holds its phases: make-experience + train = the step
    assert sum(trl["phases"].values()) <= trl["s_per_step"] + 1e-6
    assert result["ratios"]["s_per_step"] == roll["s_per_step"] / trl["s_per_step"]
    assert "| roll / TRL |" in printed and "| tiny |" in printed and "n/a" in printed
