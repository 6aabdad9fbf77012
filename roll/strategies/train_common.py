"""Pieces every training strategy shares, so `deepspeed_train` and `fsdp2_train` cannot drift apart:
the AdamW + LR-schedule construction from training_args, the micro-batch split of a train_step,
metric averaging, the HF copy saved next to engine checkpoints, the parameter checksum and the
forward-count alignment sharded engines need (every rank must run the same number of forwards)."""

import math
from pathlib import Path

import torch

from roll.algorithms.loss_tokens import count_loss_tokens, count_valid_samples, global_counts
from roll.distributed.data_proto import DataProto
from roll.strategies.batching import max_over_ranks, train_micro_batches
from roll.strategies.loss_settings import LOSS_KEY, LossSettings
from roll.strategies.vl_forward import check_images_on_every_rank

FORWARD_KEYS = ("input_ids", "attention_mask", "position_ids")
# ROLL's meta_info key: the batch keys whose valid entries a token-mean loss of a non-PPO kind (SFT, DPO,
# distillation) divides by; with it, every micro-batch gets the step's global counts (loss_token_counts)
LOSS_MASK_KEYS = "loss_mask_keys"


def lr_lambda(kind: str, warmup_steps: int, total_steps: int):
    """LR factor per optimizer step: linear warm-up over `warmup_steps`, then constant, linear or cosine
    decay to 0 at `total_steps`."""
    valid = ("constant", "linear", "cosine")
    if kind not in valid:
        raise ValueError(f"training_args.lr_scheduler_type={kind!r}; valid: {valid}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if kind == "constant" or total_steps <= warmup_steps:
            return 1.0
        progress = min((step - warmup_steps) / (total_steps - warmup_steps), 1.0)
        return 1.0 - progress if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def warmup_steps(training_args, total_steps: int) -> int:
    """warmup_steps, or (when it is 0) ceil(total_steps × warmup_ratio): ROLL's rule for its warmup_ratio."""
    if training_args.warmup_steps > 0:
        return training_args.warmup_steps
    return math.ceil(total_steps * training_args.warmup_ratio)


def build_adamw(params, training_args) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        params,
        lr=training_args.learning_rate,
        betas=(training_args.adam_beta1, training_args.adam_beta2),
        eps=training_args.adam_epsilon,
        weight_decay=training_args.weight_decay,
    )


def build_lr_scheduler(optimizer, training_args, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lr_lambda(
            training_args.lr_scheduler_type, warmup_steps(training_args, max(total_steps, 1)), max(total_steps, 1)
        ),
    )


def split_train_batch(config, batch: DataProto) -> list[DataProto]:
    """The micro-batches of one optimizer step; the batch must hold exactly micro × accumulation rows.
    With use_dynamic_batching_in_train they are token-budget groups instead, as many on every rank (their
    number is the step's accumulation count: engines divide each loss by len(micros))."""
    args = config.training_args
    micro_size, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    if len(batch) != micro_size * accumulation:
        raise ValueError(
            f"{config.name}: a train_step takes per_device_train_batch_size × "
            f"gradient_accumulation_steps = {micro_size * accumulation} rows per rank, got {len(batch)}"
        )
    if config.use_dynamic_batching_in_train:
        micros = train_micro_batches(config, batch)
    else:
        micros = [batch[slice(index * micro_size, (index + 1) * micro_size)] for index in range(accumulation)]
    if LOSS_KEY in batch.meta_info:
        settings = LossSettings.of(batch).with_global_batch_info(global_batch_info(batch, len(micros)))
        for micro in micros:
            settings.attach(micro)
    if LOSS_MASK_KEYS in batch.meta_info:
        counts = loss_token_counts(batch, len(micros))
        for micro in micros:
            micro.meta_info.update(counts)
    check_images_on_every_rank(micros)
    return micros


def _sum_over_ranks(values: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(values summed over every rank of the default group, the number of ranks); one process: as they are."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return values, 1
    on_gpu = torch.distributed.get_backend() == "nccl"
    reduced = values.cuda() if on_gpu else values.clone()
    torch.distributed.all_reduce(reduced)
    return reduced.cpu(), torch.distributed.get_world_size()


def loss_token_counts(batch: DataProto, micro_batches: int) -> dict:
    """The meta_info every micro-batch of a token-mean loss needs (ROLL's `_get_batch_num_tokens` and
    apply_loss_scale): `batch_num_tokens` and `global_valid_samples` {key: count ≥ 1} summed over every rank
    (roll.algorithms.loss_tokens), and `loss_scale` = ranks × micro-batches, which a loss multiplies its
    "sum over this micro-batch / global count" by to cancel the engines' averaging over both, so the step's
    gradient is that of the global token mean. Ranks that share rows (tensor or pipeline parallel) multiply the
    counts and the scale alike, as in global_batch_info."""
    keys = batch.meta_info[LOSS_MASK_KEYS]
    tokens = count_loss_tokens(batch.batch, keys)
    samples = count_valid_samples(batch.batch, keys, len(batch))
    ranks = 1

    def reduce(values: torch.Tensor) -> torch.Tensor:
        nonlocal ranks
        values, ranks = _sum_over_ranks(values)
        return values

    return {
        "batch_num_tokens": global_counts(tokens, reduce),
        "global_valid_samples": global_counts(samples, reduce),
        "loss_scale": ranks * micro_batches,
    }


def global_batch_info(batch: DataProto, micro_batches: int) -> dict:
    """agg_loss arguments that make each micro-batch's loss its share of the mean over the whole optimizer
    step on all ranks: valid-token and non-empty-row counts summed over every rank, and dp_size = ranks ×
    micro-batches (the engines average gradients over both). Without them token-mean would normalise each
    micro-batch by its own token count, and the result would depend on how the rows are split.
    Counting over all ranks is right for model-parallel engines too: ranks sharing rows multiply both the
    counts and dp_size by the same factor."""
    mask = batch.batch["response_mask"]
    counts = torch.tensor([float(mask.sum()), float((mask.sum(dim=-1) > 0).sum())], dtype=torch.float64)
    counts, ranks = _sum_over_ranks(counts)
    return {
        "dp_size": ranks * micro_batches,
        "batch_num_tokens": counts[0].item(),
        "global_batch_size": counts[1].item(),
    }


def forward_inputs(micro: DataProto, device) -> dict:
    return {key: micro.batch[key].to(device) for key in FORWARD_KEYS}


def mean_metrics(history: dict) -> dict:
    return {key: sum(values) / len(values) for key, values in history.items()}


def gradient_clip_value(max_grad_norm) -> float:
    """`max_grad_norm` ≤ 0 (or None) switches clipping off, as DeepSpeed's `gradient_clipping: 0` does."""
    return float(max_grad_norm) if max_grad_norm and max_grad_norm > 0 else float("inf")


CHECKSUM_CHUNK = 1 << 24  # elements widened to float64 at a time: bounds the temporary copy (128 MB)


@torch.no_grad()
def tensor_checksum(tensor: torch.Tensor) -> torch.Tensor:
    """Σp + Σp² in float64 as a 0-d tensor on the tensor's own device (torch ops where it lives, no host copy)."""
    flat = tensor.detach().reshape(-1)
    total = torch.zeros((), dtype=torch.float64, device=flat.device)
    for chunk in flat.split(CHECKSUM_CHUNK):
        wide = chunk.double()
        total += wide.sum() + torch.dot(wide, wide)
    return total


class Checksum:
    """Σ over tensors of (Σp + Σp²) in float64, accumulated on each tensor's device; `value()` brings back
    one scalar per device. Any lost or stale tensor changes it."""

    def __init__(self):
        self.totals: dict[torch.device, torch.Tensor] = {}

    def add(self, tensor: torch.Tensor) -> None:
        part = tensor_checksum(tensor)
        if part.device in self.totals:
            self.totals[part.device] += part
        else:
            self.totals[part.device] = part

    def value(self) -> float:
        return float(sum(total.item() for total in self.totals.values()))


def checksum(named_tensors) -> float:
    """Σ over tensors of (Σp + Σp²) in float64 (Checksum): any lost or stale tensor changes it."""
    total = Checksum()
    for _, tensor in named_tensors:
        total.add(tensor)
    return total.value()


# a VL model's processor besides the tokenizer: its image/video processor settings and chat template
PROCESSOR_FILES = (
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "processor_config.json",
    "chat_template.jinja",
    "chat_template.json",
)


def save_tokenizer(model_name_or_path: str, directory: Path, logger) -> None:
    """The HF copy of a checkpoint loads with AutoTokenizer too (the tokenizer never changes in training), and a
    VL model's with its processor (the processor files of model_name_or_path, copied as they are)."""
    import shutil

    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
    except (OSError, ValueError) as error:
        logger.warning("checkpoint %s: no tokenizer copied (%s)", directory, error)
        return
    tokenizer.save_pretrained(str(directory))
    for name in PROCESSOR_FILES:
        source = Path(model_name_or_path) / name
        if source.is_file():
            shutil.copyfile(source, Path(directory) / name)


def aligned_micro_batches(batch: DataProto, size: int) -> list[tuple[DataProto, bool]]:
    """Micro-batches of `size` rows, aligned over ranks (align_forward_counts)."""
    return align_forward_counts([batch[slice(start, start + size)] for start in range(0, len(batch), size)], batch)


def align_forward_counts(parts: list[DataProto], batch: DataProto) -> list[tuple[DataProto, bool]]:
    """`parts` padded with repeats of the last one (flagged False = discard) so every rank runs the same
    number of forwards. Sharded engines (FSDP2, ZeRO-3) gather weights inside each forward: a rank with one
    forward fewer would leave the others waiting forever."""
    count = max_over_ranks(len(parts))
    out = [(part, True) for part in parts]
    if count > len(parts):
        filler = parts[-1] if parts else batch  # an empty shard still has to join the collectives
        if len(filler) == 0:
            raise ValueError("a rank received no rows at all; a sharded forward needs at least one row per rank")
        out += [(filler, False)] * (count - len(parts))
    check_images_on_every_rank([part for part, _ in out])
    return out


@torch.no_grad()
def broadcast_parameters(module: torch.nn.Module, device: torch.device) -> None:
    """Every rank gets rank 0's weights before FSDP2 slices them. Weights the checkpoint does not hold
    (a value head, any partially saved model) are initialised randomly on each rank, and fully_shard
    keeps each rank's own slice of its own tensor (FSDP1's sync_module_states has no FSDP2 counterpart).
    DeepSpeed broadcasts in deepspeed.initialize itself (ZeRO-3 while partitioning)."""
    if (
        not (torch.distributed.is_available() and torch.distributed.is_initialized())
        or torch.distributed.get_world_size() == 1
    ):
        return
    for param in module.parameters():
        if param.device == device:
            torch.distributed.broadcast(param.data, src=0)
        else:  # e.g. NCCL needs device tensors while the model still sits in host memory
            staged = param.data.to(device)
            torch.distributed.broadcast(staged, src=0)
            param.data.copy_(staged)


class EvalModeScoring:
    """Scoring forwards of a training strategy run in eval mode (no dropout), then training mode returns."""

    @torch.no_grad()
    def compute_log_probs(self, batch: DataProto) -> torch.Tensor:
        return self._in_eval_mode(super().compute_log_probs, batch)

    @torch.no_grad()
    def compute_sum_pi_squared(self, batch: DataProto) -> torch.Tensor:
        return self._in_eval_mode(super().compute_sum_pi_squared, batch)

    @torch.no_grad()
    def compute_values(self, batch: DataProto) -> torch.Tensor:
        return self._in_eval_mode(super().compute_values, batch)

    def _in_eval_mode(self, fn, batch):
        was_training = self.model.training
        self.model.eval()
        try:
            return fn(batch)
        finally:
            self.model.train(was_training)


def freeze_by_prefix(model: torch.nn.Module, prefixes: list[str], logger) -> int:
    """requires_grad false for every parameter whose name starts with one of `prefixes` (model_args.
    freeze_module_prefix, ROLL's partial fine-tuning); returns how many were frozen. A prefix that names no
    parameter is an error: it is a typo or a module of another model family, and training it all would be silent."""
    if not prefixes:
        return 0
    names = [name for name, _ in model.named_parameters()]
    unmatched = [p for p in prefixes if not any(name.startswith(p) for name in names)]
    if unmatched:
        tops = sorted({".".join(name.split(".")[:2]) for name in names})[:12]
        raise ValueError(
            f"model_args.freeze_module_prefix: no parameter name starts with {unmatched}; the model's parameters "
            f"start with e.g. {tops}"
        )
    frozen = 0
    for name, param in model.named_parameters():
        if any(name.startswith(p) for p in prefixes):
            param.requires_grad_(False)
            frozen += 1
    logger.info("freeze_module_prefix %s: %d of %d parameter tensors frozen", prefixes, frozen, len(names))
    return frozen
