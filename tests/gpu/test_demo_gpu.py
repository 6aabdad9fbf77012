"""The demo on one GPU with each train strategy in fp32 and bf16, the LoRA variant, and (with two GPUs) the
separate-roles layout whose weight sync is a collective broadcast over NCCL. Two steps each; the weight-sync
check (checksums + probe log-probs) must pass after every sync."""

import math

import pytest

from tests.gpu.conftest import ONE_GPU, requires_cuda, requires_two_gpus
from tests.pipeline.helpers import make_config, run_pipeline

pytestmark = [pytest.mark.gpu, requires_cuda]

TRAIN_STRATEGIES = {
    "deepspeed_zero0": ("deepspeed_train", "${deepspeed_zero}"),
    "deepspeed_zero3": ("deepspeed_train", "${deepspeed_zero3}"),
    "fsdp2": ("fsdp2_train", "null"),
    "megatron": ("megatron_train", "null"),
}
ROLES = ("actor_train", "actor_infer", "reference")


def strategy_overrides(name: str) -> list[str]:
    strategy, config = TRAIN_STRATEGIES[name]
    return [
        f"actor_train.strategy_args.strategy_name={strategy}",
        f"actor_train.strategy_args.strategy_config={config}",
    ]


def dtype_overrides(dtype: str, roles=ROLES) -> list[str]:
    return [f"{role}.model_args.dtype={dtype}" for role in roles]


def _inspect(pipeline) -> dict:
    return {"sync_method": pipeline.ppo.weight_sync.method}


def _assert_trained_and_synced(history: dict, steps: int = 2) -> None:
    ran = history["steps"]
    assert sorted(ran) == list(range(steps))
    for step, metrics in ran.items():
        # a full check ran after this step's sync and passed (a failed check raises WeightSyncError)
        assert metrics["weight_sync/checked"] == 2 and "weight_sync/probe_max_abs_diff" in metrics, f"step {step}"
        assert math.isfinite(metrics["actor/pg_loss"]), f"step {step}: pg_loss {metrics['actor/pg_loss']}"
        assert metrics["timing/step"] > 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("strategy", list(TRAIN_STRATEGIES))
def test_demo_on_one_gpu(strategy, dtype, gpu_demo, gpu_ray, tmp_path):
    if strategy == "megatron":
        pytest.importorskip(
            "megatron.core", reason="megatron-core is not importable (scripts/gpu_bundle.sh carries it)"
        )
    overrides = [*ONE_GPU, "max_steps=2", *strategy_overrides(strategy), *dtype_overrides(dtype)]
    history = run_pipeline(make_config(gpu_demo, tmp_path / "out", overrides), inspect=_inspect)
    _assert_trained_and_synced(history)
    assert history["inspected"]["sync_method"] == "ipc"  # colocated on GPU 0: CUDA IPC handles


@pytest.mark.parametrize("strategy", ["fsdp2", "deepspeed_zero0"])
def test_lora_demo_on_one_gpu(strategy, gpu_demo, gpu_ray, tmp_path):
    one_gpu = [o for o in ONE_GPU if not o.startswith("reference.")]  # the LoRA variant has no reference role
    overrides = [*one_gpu, "max_steps=2", *strategy_overrides(strategy)]
    config = make_config(gpu_demo, tmp_path / "out", overrides, config_name="rlvr_tiny_lora")
    history = run_pipeline(config, inspect=_inspect)
    _assert_trained_and_synced(history)
    assert history["steps"][1]["actor/kl_loss"] > 0  # reference = the actor with adapters off; the policy moved


@requires_two_gpus
def test_separate_roles_sync_over_nccl(gpu_demo, gpu_ray, tmp_path):
    """actor_train (+ reference) on GPU 0, actor_infer on GPU 1: the demo's own layout on two GPUs."""
    overrides = ["weight_sync_check=full", "num_gpus_per_node=2", "max_steps=2", *strategy_overrides("fsdp2")]
    history = run_pipeline(make_config(gpu_demo, tmp_path / "out", overrides), inspect=_inspect)
    _assert_trained_and_synced(history)
    assert history["inspected"]["sync_method"] == "collective"
