"""Vision-language training scenarios for the 2-rank strategy launch (tests/strategies/harness.py): a tiny Qwen2-VL
(roll/demo/tiny_vl_model.py) trained with the production PPO loss on batches whose rows each carry one image of a
different size (1 to 6 image tokens, per-row `multi_modal_inputs` in the DataProto's non-tensor batch), dispatched
by data-parallel rank as the Cluster does. `run_vl_scenario` is the `runner` of every scenario here.

The plain reference (`plain_vl_reference`) is one process running HF's own forward (the model computes its M-RoPE
ids from mm_token_type_ids; full padded width) with AdamW, the same schedule and clipping: data parallelism 1.
"""

import dataclasses
from pathlib import Path

import numpy as np
import torch

from roll.distributed.data_proto import DataProto
from tests.strategies import harness as h

RUNNER = "tests.strategies.vl_scenarios.run_vl_scenario"
PROMPT_LENGTH, RESPONSE_LENGTH = 24, 6
VISION = "model.visual"  # the tiny Qwen2-VL's vision tower (freeze_module_prefix, ROLL's key)


def vl_scenario(name: str, strategy: str, config, micro: int = 4, accumulation: int = 2, **extra) -> dict:
    return dict(name=name, runner=RUNNER, strategy=strategy, config=config, micro=micro, accumulation=accumulation,
                **extra)  # fmt: skip


def prepare_vl(directory: Path) -> tuple[Path, Path]:
    """The tiny Qwen2-VL and harness.STEPS batches of WORLD_SIZE × ROWS_PER_RANK rows (random responses, old and
    reference log-probs off the current ones so the PPO ratio moves and clips)."""
    from roll.data.multimodal import collate_vl_prompts
    from roll.models.vl import load_processor, load_vl_model
    from roll.strategies.batching import hf_logits
    from roll.utils.functional import response_log_probs, rollout_tensors, slice_response_logits
    from tests.models.vl_fixtures import prompt_rows, tiny_vl

    model_dir = tiny_vl(directory, "qwen2_vl", seed=3)
    processor = load_processor(model_dir)
    model = load_vl_model(model_dir, torch.float32).eval()
    rows_per_step = h.WORLD_SIZE * h.ROWS_PER_RANK
    generator = torch.Generator().manual_seed(0)
    first_text_id = max(model.config.image_token_id, model.config.video_token_id) + 1  # after the vision tokens
    batches = []
    for step in range(h.STEPS):
        rows = prompt_rows(processor, rows_per_step, prompt_length=PROMPT_LENGTH, seed=100 * step)
        prompt = collate_vl_prompts(rows, PROMPT_LENGTH, processor.tokenizer.pad_token_id)
        lengths = torch.randint(1, RESPONSE_LENGTH + 1, (rows_per_step,), generator=generator)
        response_mask = (torch.arange(RESPONSE_LENGTH) < lengths[:, None]).float()
        vocab = model.config.get_text_config().vocab_size
        responses = torch.randint(first_text_id, vocab, (rows_per_step, RESPONSE_LENGTH), generator=generator)
        responses = responses * response_mask.long()
        tensors = rollout_tensors(
            prompt.batch["prompts"], prompt.batch["attention_mask"], responses, response_mask, torch.zeros_like(
                response_mask)
        )  # fmt: skip
        mm = [row["multi_modal_inputs"] for row in rows]
        with torch.no_grad():
            logits = hf_logits(model, as_vl_proto({"tensors": tensors, "mm": mm}), torch.device("cpu"), False)
            current = response_log_probs(slice_response_logits(logits, RESPONSE_LENGTH), responses)
        tensors["old_log_probs"] = (current + 0.3 * torch.randn(current.shape, generator=generator)) * response_mask
        tensors["ref_log_probs"] = (current + 0.1 * torch.randn(current.shape, generator=generator)) * response_mask
        advantages = torch.randn(rows_per_step, 1, generator=generator).expand(-1, RESPONSE_LENGTH)
        tensors["advantages"] = advantages * response_mask
        batches.append({"tensors": tensors, "mm": mm})
    data_file = directory / "vl_batches.pt"
    torch.save(batches, data_file)
    return Path(model_dir), data_file


def as_vl_proto(batch: dict, rows=None, loss_agg_mode: str | None = None) -> DataProto:
    """A training batch (tensors + per-row multi_modal_inputs) with the harness's loss settings attached."""
    rows = slice(None) if rows is None else rows
    tensors = {key: value[rows] for key, value in batch["tensors"].items()}
    column = np.empty(len(batch["mm"]), dtype=object)
    column[:] = batch["mm"]
    proto = DataProto.from_dict(
        tensors=tensors, non_tensors={"multi_modal_inputs": column[rows]}, meta_info={"temperature": 1.0}
    )
    loss = dataclasses.replace(h.LOSS, loss_agg_mode=loss_agg_mode) if loss_agg_mode else h.LOSS
    loss.attach(proto)
    return proto


def hf_forward_logits(model, micro: DataProto) -> torch.Tensor:
    """HF's own forward of a padded VL micro-batch: the model derives its M-RoPE ids (no position ids given)."""
    from roll.strategies.vl_forward import vision_tensors

    ids, mask = micro.batch["input_ids"], micro.batch["attention_mask"]
    vision = vision_tensors(micro.non_tensor_batch["multi_modal_inputs"])
    types = (ids == model.config.image_token_id).long()
    return model(input_ids=ids, attention_mask=mask, mm_token_type_ids=types, use_cache=False, **vision).logits


def plain_vl_reference(model_dir: Path, data_file: Path, micro: int = 4, frozen: tuple = ()) -> dict:
    """One process: HF's forward, AdamW over the parameters not under `frozen`, micro-batches of `micro` rows of
    the whole global batch, loss / accumulation, one optimizer and schedule step per batch."""
    from roll.configs.worker import TrainingArgs
    from roll.models.vl import load_vl_model
    from roll.strategies.train_common import build_adamw, build_lr_scheduler

    batches = torch.load(data_file)
    rows = h.WORLD_SIZE * h.ROWS_PER_RANK
    args = TrainingArgs(per_device_train_batch_size=micro, gradient_accumulation_steps=rows // micro, **h.TRAINING)
    model = load_vl_model(model_dir, torch.float32).train()
    for name, param in model.named_parameters():
        param.requires_grad_(not any(name.startswith(prefix) for prefix in frozen))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_adamw(trainable, args)
    scheduler = build_lr_scheduler(optimizer, args, h.STEPS)
    steps = []
    for batch in batches:
        proto = as_vl_proto(batch)
        history = {}
        for index in range(args.gradient_accumulation_steps):
            part = proto[slice(index * micro, (index + 1) * micro)]
            loss, metrics = h.loss_fn(part, hf_forward_logits(model, part))
            (loss / args.gradient_accumulation_steps).backward()
            for key, value in metrics.items():
                history.setdefault(key, []).append(value)
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        metrics = {key: sum(values) / len(values) for key, values in history.items()}
        metrics.update(grad_norm=grad_norm.item(), lr=scheduler.get_last_lr()[0])
        steps.append(metrics)
    return {"steps": steps, "params": {name: p.detach().clone() for name, p in model.named_parameters()}}


def run_vl_scenario(scenario: dict, rank: int, model_dir: Path, batches, workdir: Path) -> dict:
    """scenario keys as harness.run_scenario's (name, strategy, config, micro, accumulation, [save_after],
    [resume_from], [worker], [model_args], [loss_agg_mode]) plus [sync]: rank 0 loads the trained weights into an
    hf_infer strategy (the weight sync's receiver) and records its checksum and log-probs."""
    from roll.strategies import create_strategy

    world = torch.distributed.get_world_size()
    config = h.make_worker_config(
        model_dir, scenario["strategy"], scenario["config"], scenario["micro"], scenario["accumulation"], world
    )
    config = dataclasses.replace(config, **scenario.get("worker", {}))
    config.model_args = dataclasses.replace(config.model_args, **scenario.get("model_args", {}))
    torch.manual_seed(h.CRITIC_SEED + rank)  # LoRA's A matrices differ per rank until the engine syncs them
    strategy = create_strategy(scenario["strategy"], h.StandInWorker(config, rank, world))
    strategy.initialize(total_steps=h.STEPS)
    first_step = 0
    if scenario.get("resume_from"):
        source = workdir / scenario["resume_from"]
        first_step = int((source / "steps").read_text())
        strategy.load_checkpoint(str(source))
    layout = h.dp_layout(strategy, world)
    if scenario.get("text_only_rank") is not None:
        return _text_only_shard(strategy, scenario["text_only_rank"], batches[0], layout, rank)
    steps, micro_counts = [], []
    for step in range(first_step, h.STEPS):
        batch = h.dispatched(as_vl_proto(batches[step], None, scenario.get("loss_agg_mode")), layout, rank)
        if scenario.get("worker"):
            from roll.strategies.train_common import split_train_batch

            micro_counts.append(len(split_train_batch(config, batch)))
        steps.append(h._gathered_metrics(strategy.train_step(batch, h.loss_fn)))
        if scenario.get("save_after") == step + 1:
            h.save_scenario_checkpoint(strategy, workdir / scenario["name"], step + 1, rank)
    params = {name: tensor.detach().cpu().clone() for name, tensor in strategy.named_hf_parameters()}
    uneven = as_vl_proto(batches[0], slice(0, 10) if layout.dp_size == 1 else h._uneven_rows(layout.dp_ranks[rank]))
    result = {
        "first_step": first_step,
        "steps": steps,
        "params": params,
        "log_probs": h.collected(strategy.compute_log_probs(uneven), layout),
        "checksum": strategy.state_checksum(),
        "micro_counts": micro_counts,
        "trainable": sorted(name for name, p in strategy.module.named_parameters() if p.requires_grad),
    }
    if scenario.get("save_after"):
        hf_dir = workdir / scenario["name"] / "hf"
        result["hf_files"] = sorted(p.name for p in hf_dir.iterdir())
    if scenario.get("sync") and rank == 0:
        from tests.models.vl_fixtures import hf_infer

        receiver = hf_infer(model_dir)
        receiver.load_weights(params.items())
        result["receiver_checksum"] = receiver.state_checksum()
        result["receiver_log_probs"] = receiver.compute_log_probs(as_vl_proto(batches[0], slice(0, 10)))
    del strategy
    return result


def _text_only_shard(strategy, text_only_rank: int, batch: dict, layout, rank: int) -> dict:
    """One train_step where `text_only_rank`'s rows carry no images: every rank records the error it raised."""
    shard = h.dispatched(as_vl_proto(batch), layout, rank)
    if rank == text_only_rank:
        empty = np.empty(len(shard), dtype=object)
        empty[:] = [{} for _ in range(len(shard))]
        shard.non_tensor_batch["multi_modal_inputs"] = empty
    try:
        strategy.train_step(shard, h.loss_fn)
    except ValueError as error:
        return {"errors": h.collected(str(error), layout)}
    return {"errors": h.collected(None, layout)}
