"""The configs the GPU tier (tests/gpu/) and benchmarks/gpu_scale.py run load and validate here, and their
placement gives the weight-sync path the GPU tests assert: a CPU check of what only a GPU can run."""

import importlib.util
from pathlib import Path

import pytest

from roll.configs import compose_config
from roll.pipeline.core.weight_sync import choose_method
from roll.pipeline.rlvr.config import load_rlvr_config
from tests.gpu.conftest import ONE_GPU
from tests.gpu.test_demo_gpu import TRAIN_STRATEGIES, dtype_overrides, strategy_overrides

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "tiny_rlvr"


def load(overrides, name="rlvr_tiny"):
    return load_rlvr_config(compose_config(str(TINY), name, list(overrides)))


def sync_method(config) -> str:
    return choose_method("auto", config.actor_train, config.actor_infer)[0]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("strategy", list(TRAIN_STRATEGIES))
def test_one_gpu_demo_configs_validate_and_colocate(strategy, dtype):
    config = load([*ONE_GPU, "max_steps=2", *strategy_overrides(strategy), *dtype_overrides(dtype)])
    assert config.num_gpus_per_node == 1 and config.actor_train.strategy_args.strategy_name.endswith("_train")
    assert {config.actor_train.model_args.dtype, config.actor_infer.model_args.dtype} == {dtype}
    assert sync_method(config) == "ipc" and config.weight_sync_check == "full"


def test_lora_and_two_gpu_configs_validate_with_their_sync_paths():
    one_gpu = [o for o in ONE_GPU if not o.startswith("reference.")]
    assert sync_method(load([*one_gpu, *strategy_overrides("fsdp2")], name="rlvr_tiny_lora")) == "ipc"
    assert sync_method(load(["num_gpus_per_node=2", *strategy_overrides("fsdp2")])) == "collective"
    assert load(ONE_GPU).weight_sync_check == "full"  # the tier asserts a full check after every step


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_benchmark_config_validates_for_every_strategy(dtype, tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_scale", ROOT / "benchmarks" / "gpu_scale.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for strategy in bench.STRATEGIES:
        args = bench.parse_args(["--strategy", strategy, "--dtype", dtype])
        config = load(bench.overrides(args, tmp_path / "demo", tmp_path / "model", tmp_path / "run"))
        assert config.rollout_batch_size * config.num_return_sequences_in_group == 256  # issue 30's measurement
        assert config.actor_infer.generating_args.max_new_tokens == 128 and sync_method(config) == "ipc"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _launcher():
    spec = importlib.util.spec_from_file_location("start_rlvr", ROOT / "examples" / "start_rlvr_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _on_gpu_0(config, dtype: str) -> None:
    roles = (config.actor_train, config.actor_infer, config.reference)
    assert config.num_gpus_per_node == 1 and all(list(role.device_mapping) == [0] for role in roles)
    assert {role.model_args.dtype for role in roles} == {dtype} and sync_method(config) == "ipc"
    assert config.actor_infer.strategy_args.strategy_name == "hf_infer"


@pytest.mark.parametrize("flags", [[], ["--tiny"], ["--strategy", "deepspeed_zero0"]])
def test_the_learning_run_validates_and_passes_the_launchers_dry_run(flags, tmp_path, capsys):
    """benchmarks/gpu_learn.py's RL run: the launcher command it runs on the GPU, with --dry_run."""
    learn = _script("gpu_learn")
    args = learn.parse_args(flags)
    config = load(learn.launcher_overrides(args, tmp_path / "demo", tmp_path / "model", tmp_path / "run"))
    _on_gpu_0(config, "float32" if "--tiny" in flags else "bfloat16")
    assert config.actor_train.training_args.learning_rate == args.lr and config.max_steps == args.steps
    assert config.eval_steps == args.eval_steps and config.response_length == 6  # the demo's task and replies
    command = learn.launcher_command(args, tmp_path / "demo", tmp_path / "model", tmp_path / "run", dry_run=True)
    assert Path(command[1]) == ROOT / "examples" / "start_rlvr_pipeline.py" and "--dry_run" in command
    assert _launcher().main(command[2:]) == 0
    assert "colocated : actor_infer + actor_train + reference" in capsys.readouterr().out


def test_learning_curve_is_read_from_the_launchers_log():
    learn = _script("gpu_learn")
    log = (
        "00:43:06 I [roll.pipeline] validation before training: val/score/math 0.000, val/score/all 0.125, x 1.0\n"
        "00:43:08 I [roll.pipeline] [1/4] elapsed 0m01s ETA 0m05s reward 0.023 | len 5.016 | sync ok | step 1.9s\n"
        "00:43:10 I [roll.pipeline] [2/4] elapsed 0m03s ETA 0m03s reward 0.070 | val 0.240 | sync ok | step 2.1s\n"
        "00:43:13 I [roll.pipeline] [4/4] elapsed 0m06s ETA 0m00s reward 0.168 | val 0.312 | sync ok | step 0.4s\n"
    )
    assert learn.accuracy_curve(log) == {0: 0.125, 2: 0.24, 4: 0.312}
    assert learn.accuracy_curve("no validation here") == {}


@pytest.mark.parametrize("flags", [["--dtype", "bfloat16"], ["--dtype", "float32"], ["--fast"]])
def test_the_trl_comparison_config_validates_and_maps_onto_trls_settings(flags, tmp_path):
    """benchmarks/gpu_vs_trl.py: roll's side validates as run on the GPU (scripts/gpu_session.sh's --fast run
    too), and TRL's GRPOConfig settings come from the same config (the matched work of the module docstring)."""
    bench = _script("gpu_vs_trl")
    args = bench.parse_args(flags)
    config = bench.roll_config(args, tmp_path, tmp_path / "model", tmp_path / "run")
    _on_gpu_0(config, args.dtype)
    fast = "--fast" in flags
    resident = {"keep_resident": True} if fast else None
    assert config.actor_infer.strategy_args.strategy_config == (
        {**resident, "cache_implementation": "static"} if fast else None
    )
    assert config.reference.strategy_args.strategy_config == resident
    assert config.actor_train.strategy_args.strategy_config == resident
    assert config.rollout_batch_size * config.num_return_sequences_in_group == 256
    assert config.actor_infer.generating_args.max_new_tokens == 128 and config.max_steps == args.steps
    settings, optimizer_steps = bench.vs_trl.matched_grpo_settings(config, args.seed, args.steps)
    assert optimizer_steps == 4 and settings["max_steps"] == 4 * args.steps and settings["steps_per_generation"] == 4
    assert settings["per_device_train_batch_size"] == 64 and settings["num_generations"] == 8
    assert settings["max_completion_length"] == 128 and settings["learning_rate"] == args.lr == 1e-6
    assert settings["beta"] == config.kl_loss_coef == 0.001 and settings["epsilon"] == config.pg_clip == 0.2
    assert settings["temperature"] == 1.0 and not settings["gradient_checkpointing"]
