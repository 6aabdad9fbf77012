"""LoRA scenarios for megatron_train (run in the session's megatron launch, tests/strategies/conftest.py), and
their single-process reference: the HF model with the same adapters as roll/strategies/megatron/lora.py puts
on megatron's fused linears (one A shared by q/k/v and one by gate/up, B zero), trained by a plain AdamW
loop as harness.plain_reference does. Checked by tests/strategies/test_megatron_lora.py."""

import dataclasses
from pathlib import Path

import torch

from tests.strategies import harness as h

RUNNER = "tests.strategies.megatron_lora_scenarios.run"
LORA = dict(lora_target="all-linear", lora_rank=4, lora_alpha=8, lora_dropout=0.0)
LORA_SEED = 99  # rank r draws with LORA_SEED + r: megatron_train must train rank 0's initial adapters
# megatron linear → (HF modules it fuses, the HF parent)
FUSED = {
    "linear_qkv": (("q_proj", "k_proj", "v_proj"), "self_attn"),
    "linear_proj": (("o_proj",), "self_attn"),
    "linear_fc1": (("gate_proj", "up_proj"), "mlp"),
    "linear_fc2": (("down_proj",), "mlp"),
}
MEGATRON_PARENT = {"self_attn": "self_attention", "mlp": "mlp"}


def scenario(name: str, config=None, accumulation: int = 2, **extra) -> dict:
    return dict(
        name=name,
        runner=RUNNER,
        strategy="megatron_train",
        config=config or {},
        micro=4,
        accumulation=accumulation,
        **extra,
    )


def _params(strategy) -> dict:
    return {name: p.detach().cpu().clone() for name, p in strategy.module.named_parameters()}


def run(scenario: dict, rank: int, model_dir: Path, batches, workdir: Path) -> dict:
    """TP1 × DP2 or TP2: rows dispatched by data-parallel rank as the Cluster does (harness.dispatched)."""
    from roll.strategies import create_strategy
    from tests.strategies import offload_probe

    config = h.make_worker_config(
        model_dir, "megatron_train", scenario["config"], scenario["micro"], scenario["accumulation"], h.WORLD_SIZE
    )
    config.model_args = dataclasses.replace(config.model_args, **LORA)
    strategy = create_strategy("megatron_train", h.StandInWorker(config, rank, h.WORLD_SIZE))
    torch.manual_seed(LORA_SEED + rank)
    strategy.initialize(total_steps=h.STEPS)
    before = _params(strategy)
    trainable = sorted(n for n, p in strategy.module.named_parameters() if p.requires_grad)
    layout = h.dp_layout(strategy, h.WORLD_SIZE)
    scoring_rows = h.uneven_scoring_batch(batches[0], layout, rank)
    initial = h.collected(strategy.compute_log_probs(scoring_rows), layout)  # adapters on, B = 0
    initial_reference = h.collected(strategy.compute_reference_log_probs(scoring_rows), layout)
    first_step = 0
    if scenario.get("resume_from"):
        source = workdir / scenario["resume_from"]
        first_step = int((source / "steps").read_text())
        strategy.load_checkpoint(str(source))
    steps, round_trips, saved_log_probs = [], [], None
    for step in range(first_step, h.STEPS):
        batch = h.dispatched(h.as_proto(batches[step]), layout, rank)
        if scenario.get("offload"):
            round_trips.append(offload_probe.round_trip(strategy))
            strategy.compute_log_probs(batch)
        steps.append(h._gathered_metrics(strategy.train_step(batch, h.loss_fn)))
        if scenario.get("save_after") == step + 1:
            h.save_scenario_checkpoint(strategy, workdir / scenario["name"], step + 1, rank)
            saved_log_probs = h.collected(strategy.compute_log_probs(scoring_rows), layout)
    optimizer_numel = [None] * h.WORLD_SIZE
    held = sum(p.numel() for part in strategy._optimizers() for g in part.optimizer.param_groups for p in g["params"])
    torch.distributed.all_gather_object(optimizer_numel, held)
    result = {
        "first_step": first_step,
        "steps": steps,
        "before": before,
        "after": _params(strategy),
        "trainable": trainable,
        "optimizer_numel": optimizer_numel,
        "initial_log_probs": initial,
        "initial_reference_log_probs": initial_reference,
        "merged": {n: t.detach().cpu().clone() for n, t in strategy.named_hf_parameters()},
        "log_probs": h.collected(strategy.compute_log_probs(scoring_rows), layout),
        "reference_log_probs": h.collected(strategy.compute_reference_log_probs(scoring_rows), layout),
        "saved_log_probs": saved_log_probs,
        "round_trips": round_trips,
    }
    del strategy
    return result


def plain_fused_lora_reference(model_dir: Path, data_file: Path, initial: dict, micro: int = 4) -> dict:
    """Single process: the HF model with fused-group adapters (A from megatron's `initial` parameters, B zero
    in HF row order: AdamW, weight decay and norm clipping are elementwise / permutation-invariant, so
    megatron's interleaved q/k/v rows train the same), AdamW over the adapters, harness's schedule."""
    from transformers import AutoModelForCausalLM

    from roll.configs.worker import TrainingArgs
    from roll.strategies.train_common import build_adamw, build_lr_scheduler

    batches = torch.load(data_file)
    args = TrainingArgs(
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=h.WORLD_SIZE * h.ROWS_PER_RANK // micro,
        **h.TRAINING,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.requires_grad_(False)
    scaling = LORA["lora_alpha"] / LORA["lora_rank"]
    adapters = {}  # HF module prefix of the group → (A, B, [(HF module, row offset, rows)])
    for index, layer in enumerate(model.model.layers):
        for fused, (leaves, parent) in FUSED.items():
            modules = [getattr(getattr(layer, parent), leaf) for leaf in leaves]
            a = initial[f"decoder.layers.{index}.{MEGATRON_PARENT[parent]}.{fused}.lora.A"].clone()
            b = torch.zeros(sum(m.out_features for m in modules), a.shape[0])
            a, b = torch.nn.Parameter(a), torch.nn.Parameter(b)
            offset = 0
            for leaf, module in zip(leaves, modules):
                rows = slice(offset, offset + module.out_features)
                offset += module.out_features
                module.register_forward_hook(
                    lambda mod, inputs, out, a=a, b=b, rows=rows: out + scaling * (inputs[0] @ a.T) @ b[rows].T
                )
                adapters[f"model.layers.{index}.{parent}.{leaf}"] = (a, b, rows)
    trainable = list({id(p): p for a, b, _ in adapters.values() for p in (a, b)}.values())
    optimizer = build_adamw(trainable, args)
    scheduler = build_lr_scheduler(optimizer, args, h.STEPS)
    model.train()
    steps = h.plain_steps(model, trainable, optimizer, scheduler, batches, args, micro)
    merged = {name: p.detach().clone() for name, p in model.named_parameters()}
    with torch.no_grad():
        for module, (a, b, rows) in adapters.items():
            merged[f"{module}.weight"] += scaling * b[rows] @ a
    return {"steps": steps, "merged": merged}
