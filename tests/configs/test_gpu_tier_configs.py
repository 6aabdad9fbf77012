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
