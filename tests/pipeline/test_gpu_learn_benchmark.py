"""benchmarks/gpu_learn.py --tiny on CPU: the code the GPU's learning run uses (the demo's data and tokenizer, a
random-init model of the requested shape, the demo's warm start on the run's device, the launcher in a child
process with every role on device 0, the held-out accuracy read from its log), at the demo's size, 2 RL steps."""

import importlib.util
import json

from tests.pipeline.helpers import REPO


def test_gpu_learn_runs_warm_start_and_the_launcher_at_a_tiny_shape(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gpu_learn", REPO / "benchmarks" / "gpu_learn.py")
    learn = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(learn)
    work, out = tmp_path / "work", tmp_path / "out.json"
    flags = ["--tiny", "--steps", "2", "--eval_steps", "2", "--warm_start_steps", "30"]
    result = learn.main([*flags, "--work_dir", str(work), "--json", str(out)])
    printed = capsys.readouterr().out

    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    config = json.loads((work / "model" / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_key_value_heads"]) == (64, 2, 1)
    assert result["device"] == "cpu" and result["launcher_exit"] == 0
    assert result["warm_start_loss_last"] < result["warm_start_loss_first"]  # the warm start trained the model
    assert result["reading_format_ok"] > 0.5  # and taught the reply format it is graded on
    assert sorted(result["heldout_curve"]) == [0, 2] and result["before"] == result["heldout_curve"][0]
    assert 0.0 <= result["after"] <= 1.0 and result["after"] == result["heldout_curve"][2]
    assert "[2/2]" in (work / "launcher.log").read_text()  # the launcher's own step lines, kept
    assert "before RL ->" in printed and "warm start:" in printed
