"""LoRA scenarios for the 2-rank strategy launch (tests/strategies/harness.py): `run_lora_scenario` is the
`runner` of every scenario built by `lora_scenario`, so they share harness.launch with nothing else to set up.

A scenario trains the tiny model's adapters for harness.STEPS steps with the production PPO loss and
records what tests/strategies/test_lora_strategies.py checks: every parameter before and after (peft
names, gathered), which parameters require gradients, what the optimizer holds, the merged HF-named
weights of the weight sync, the actor's log-probs right after a checkpoint (to compare with the merged
export), and the reference log-probs computed with the adapters disabled.
"""

import dataclasses
from pathlib import Path

import torch

from tests.strategies import harness as h

RUNNER = "tests.strategies.lora_scenarios.run_lora_scenario"
LORA = dict(lora_rank=4, lora_alpha=8, lora_dropout=0.0)
LORA_SEED = 99  # rank r draws its lora_A with LORA_SEED + r: every engine must train rank 0's initial adapters


def lora_scenario(name: str, strategy: str, config, target: str, **extra) -> dict:
    return dict(
        name=name, runner=RUNNER, strategy=strategy, config=config, micro=4, accumulation=2, target=target, **extra
    )


def _gathered(rank: int, value):
    everyone = [None] * h.WORLD_SIZE
    torch.distributed.all_gather_object(everyone, value)
    return everyone


def _optimizer_numel(strategy) -> int:
    """Elements the optimizer steps on this rank (ZeRO: its flat fp32 partitions; FSDP2: local shards)."""
    optimizer = strategy.optimizer
    if hasattr(optimizer, "fp32_partitioned_groups_flat"):  # ZeRO-3: the flat fp32 partitions it steps
        return sum(flat.numel() for flat in optimizer.fp32_partitioned_groups_flat)
    inner = getattr(optimizer, "optimizer", optimizer)  # DeepSpeed's ZeRO wrapper keeps the torch optimizer inside
    total = 0
    for group in inner.param_groups:
        for param in group["params"]:
            local = param.to_local() if hasattr(param, "to_local") else param
            total += local.numel()
    return total


def plain_lora_reference(model_dir: Path, data_file: Path, target: str, micro: int = 4) -> dict:
    """Single process: the HF model wrapped by peft as rank 0 wraps it, AdamW over the adapters, the
    harness's schedule and clipping, the whole global batch per step (as harness.plain_reference)."""
    from transformers import AutoModelForCausalLM

    from roll.configs.worker import ModelArgs, TrainingArgs
    from roll.strategies.lora import apply_lora
    from roll.strategies.train_common import build_adamw, build_lr_scheduler

    batches = torch.load(data_file)
    args = TrainingArgs(
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=h.WORLD_SIZE * h.ROWS_PER_RANK // micro,
        **h.TRAINING,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(LORA_SEED)
    model = apply_lora(model, ModelArgs(model_name_or_path=str(model_dir), lora_target=target, **LORA))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_adamw(trainable, args)
    scheduler = build_lr_scheduler(optimizer, args, h.STEPS)
    steps = h.plain_steps(model, trainable, optimizer, scheduler, batches, args, micro)
    return {"steps": steps, "params": {name: p.detach().clone() for name, p in model.named_parameters()}}


def run_lora_scenario(scenario: dict, rank: int, model_dir: Path, batches, workdir: Path) -> dict:
    """scenario keys: name, strategy, config, micro, accumulation, target (model_args.lora_target),
    [gradient_checkpointing], [save_after], [resume_from], [offload], [model_args] (as in harness.run_scenario)."""
    from roll.strategies import create_strategy
    from tests.strategies import offload_probe

    config = h.make_worker_config(
        model_dir,
        scenario["strategy"],
        scenario["config"],
        scenario["micro"],
        scenario["accumulation"],
        h.WORLD_SIZE,
        scenario.get("gradient_checkpointing", False),
    )
    config.model_args = dataclasses.replace(
        config.model_args, lora_target=scenario["target"], **LORA, **scenario.get("model_args", {})
    )
    strategy = create_strategy(scenario["strategy"], h.StandInWorker(config, rank, h.WORLD_SIZE))
    torch.manual_seed(LORA_SEED + rank)
    strategy.initialize(total_steps=h.STEPS)
    before = {name: t.detach().cpu().clone() for name, t in strategy.named_full_parameters()}
    trainable = sorted(name for name, p in strategy.module.named_parameters() if p.requires_grad)
    first_step = 0
    if scenario.get("resume_from"):
        source = workdir / scenario["resume_from"]
        first_step = int((source / "steps").read_text())
        strategy.load_checkpoint(str(source))
    layout = h.dp_layout(strategy, h.WORLD_SIZE)  # ranks sharing rows (Ulysses) get the same ones
    steps, saved_log_probs, round_trips = [], None, []
    for step in range(first_step, h.STEPS):
        batch = h.dispatched(h.as_proto(batches[step]), layout, rank)
        if scenario.get("offload"):  # colocated roles: offload + reload (watched) + a scoring forward between phases
            round_trips.append(offload_probe.round_trip(strategy))
            strategy.compute_log_probs(batch)
        steps.append(h._gathered_metrics(strategy.train_step(batch, h.loss_fn)))
        if scenario.get("save_after") == step + 1:
            h.save_scenario_checkpoint(strategy, workdir / scenario["name"], step + 1, rank)
            saved_log_probs = _gathered(
                rank, strategy.compute_log_probs(h.uneven_scoring_batch(batches[0], layout, rank))
            )
    after = {name: t.detach().cpu().clone() for name, t in strategy.named_full_parameters()}
    merged = {name: t.detach().cpu().clone() for name, t in strategy.named_hf_parameters()}
    scoring_rows = h.uneven_scoring_batch(batches[0], layout, rank)
    result = {
        "first_step": first_step,
        "steps": steps,
        "before": before,
        "after": after,
        "merged": merged,
        "trainable": trainable,
        "optimizer_numel": _gathered(rank, _optimizer_numel(strategy)),
        "log_probs": _gathered(rank, strategy.compute_log_probs(scoring_rows)),
        "reference_log_probs": _gathered(rank, strategy.compute_reference_log_probs(scoring_rows)),
        "saved_log_probs": saved_log_probs,
        "checksum": strategy.state_checksum(),
        "adapter": dict(strategy.named_adapter_parameters()),  # adapter-only weight sync's source
        "adapter_checksum": strategy.adapter_checksum(),
        "adapter_config": strategy.adapter_config(),
        "round_trips": round_trips,
    }
    del strategy
    return result
