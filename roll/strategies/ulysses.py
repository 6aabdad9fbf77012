"""Ulysses sequence parallelism (`model_args.ulysses_size`) for the HF-module FSDP2 strategies.

A role of W ranks forms W / U data-parallel groups of U = ulysses_size consecutive ranks (ROLL's layout:
dp_rank = rank // U, sp_rank = rank % U). The U ranks of a group get the same rows; each runs the model on
its 1/U slice of the sequence. Everything but attention is per token, so only attention needs the other
slices: around the real kernel, an all-to-all turns (B, H, S/U, D) sequence-sharded heads into (B, H/U, S, D)
head-sharded full sequences and back (the attention function registered here in transformers'
AttentionInterface as `roll_ulysses`). The kernel then sees exactly the causal/padding mask of the unsplit
forward, built from the full 2D mask and position ids (which travel to it as a forward kwarg, so activation
checkpointing's recompute finds them too). Position ids are the global ones, sliced with the tokens.

Sequence packing works the same way on the one packed row (transformers derives its block-diagonal mask from
the position ids). The logits come back to every rank of the group (an all-gather along the sequence), so
losses and scores see the unsplit (rows, T, V) tensor. Its backward keeps this rank's slice of the gradient
× U: every rank of a group computes the same loss, so the group's gradient is U × one rank's, and FSDP2
averages over all W ranks (U per group): the update equals the one of W / U data-parallel ranks without
Ulysses.
"""

import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from roll.distributed.data_proto import DataProto
from roll.strategies.batching import FORWARD_KEYS, pack, real_columns, unpack

ATTENTION_NAME = "roll_ulysses"
CONTEXT_KWARG = "roll_ulysses"


def ulysses_size_of(model_args) -> int:
    """model_args.ulysses_size with null = 1 (ROLL's default), checked."""
    size = getattr(model_args, "ulysses_size", 1)
    size = 1 if size is None else size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"model_args.ulysses_size={size!r}: expected a positive integer (1 or null = off)")
    return size


def check_world(size: int, world_size: int) -> int:
    """The data-parallel size world_size / ulysses_size; a ValueError naming the key where it does not divide."""
    if world_size % size:
        raise ValueError(
            f"model_args.ulysses_size={size} does not divide the role's {world_size} ranks (device_mapping); "
            f"valid: a divisor of {world_size}"
        )
    return world_size // size


def check_model(size: int, hf_config) -> None:
    """Heads must split evenly over the group (KV heads may instead be repeated up to it); every layer must be
    full causal attention (the mask rebuilt for the full sequence is the causal one)."""
    config = getattr(hf_config, "text_config", None) or hf_config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if heads % size:
        raise ValueError(
            f"model_args.ulysses_size={size}: the model's {heads} attention heads do not split over {size} ranks; "
            f"valid: a divisor of {heads}"
        )
    if kv_heads % size and size % kv_heads:
        raise ValueError(
            f"model_args.ulysses_size={size}: the model's {kv_heads} key/value heads neither split over {size} ranks "
            f"nor divide {size} (then they are repeated); valid: a divisor or multiple of {kv_heads}"
        )
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if layer_types != {"full_attention"}:
        raise ValueError(
            f"model_args.ulysses_size={size}: the model has {sorted(layer_types)} layers; roll's Ulysses builds "
            "full causal attention only (no sliding-window layers)"
        )


@dataclass
class UlyssesGroup:
    size: int
    rank: int  # within the group
    group: object  # torch.distributed ProcessGroup of the group's ranks


def new_group(size: int) -> UlyssesGroup:
    """This rank's group (collective: every rank creates every group, as torch.distributed requires)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    check_world(size, world)
    mine = None
    for start in range(0, world, size):
        group = dist.new_group(list(range(start, start + size)))
        if start <= rank < start + size:
            mine = group
    return UlyssesGroup(size, rank % size, mine)


def layout(rank: int, world_size: int, size: int) -> dict:
    """Worker.data_parallel_info of a rank: the group shares a data-parallel rank; its first rank reports."""
    return {"dp_rank": rank // size, "dp_size": world_size // size, "collect": rank % size == 0}


# --- collectives with autograd -------------------------------------------------------------------------------
def _all_to_all(chunks: torch.Tensor, group) -> torch.Tensor:
    """chunks (U, ...): chunk j goes to group rank j; out[i] is what group rank i sent here."""
    chunks = chunks.contiguous()
    out = torch.empty_like(chunks)  # contiguous too: empty_like keeps a permuted view's strides
    dist.all_to_all_single(out, chunks, group=group)
    return out


def _seq_to_heads(x: torch.Tensor, group: UlyssesGroup) -> torch.Tensor:
    """(B, H, S/U, D) → (B, H/U, S, D): this rank's head slice of every rank's sequence slice, in rank order."""
    b, h, s, d = x.shape
    u = group.size
    out = _all_to_all(x.reshape(b, u, h // u, s, d).transpose(0, 1), group.group)  # (U, B, H/U, S/U, D)
    return out.permute(1, 2, 0, 3, 4).reshape(b, h // u, u * s, d)


def _heads_to_seq(y: torch.Tensor, group: UlyssesGroup) -> torch.Tensor:
    """(B, H/U, S, D) → (B, H, S/U, D): the inverse of _seq_to_heads."""
    b, h, full, d = y.shape
    u = group.size
    out = _all_to_all(y.reshape(b, h, u, full // u, d).permute(2, 0, 1, 3, 4), group.group)  # (U, B, H/U, S/U, D)
    return out.transpose(0, 1).reshape(b, u * h, full // u, d)


class _SeqToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _seq_to_heads(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _heads_to_seq(grad, ctx.group), None


class _HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, group):
        ctx.group = group
        return _heads_to_seq(y, group)

    @staticmethod
    def backward(ctx, grad):
        return _seq_to_heads(grad, ctx.group), None


class _GatherSequence(torch.autograd.Function):
    """(B, S/U, ...) → (B, S, ...) on every rank; backward: this rank's slice × U (see the module docstring)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(group.size)]
        dist.all_gather(parts, x.contiguous(), group=group.group)
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, grad):
        group = ctx.group
        return grad.chunk(group.size, dim=1)[group.rank] * group.size, None


# --- the attention function --------------------------------------------------------------------------------
@dataclass
class UlyssesContext:
    """What the attention function needs besides q/k/v: the group, the kernel it wraps and the full-sequence
    mask and position ids of the current forward."""

    group: UlyssesGroup
    kernel: str  # the transformers attention implementation the model would use without Ulysses
    mask: object  # the full-sequence mask create_causal_mask builds for `kernel` (None: plain causal)
    position_ids: torch.Tensor


class _LocalHeads:
    """The attention module as the kernel sees it after the all-to-all: its own query/KV head ratio."""

    def __init__(self, module, groups: int):
        self._module, self.num_key_value_groups = module, groups

    def __getattr__(self, name):
        return getattr(self._module, name)


def _kernel(name: str, module):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if name == "eager":  # each modeling file has its own eager function; the HF-module's is the unsplit one
        return sys.modules[type(module).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[name]


def ulysses_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers attention function: query (B, H, S/U, D), key/value (B, Hkv, S/U, D) → (B, S/U, H, D)."""
    context: UlyssesContext = kwargs.pop(CONTEXT_KWARG, None)
    if context is None:
        raise RuntimeError(
            f"attention {ATTENTION_NAME!r} called without its context: the model must be run through "
            "roll.strategies.ulysses.ulysses_logits"
        )
    group, u = context.group, context.group.size
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads % u:  # fewer KV heads than ranks: each rank gets a copy of the one its query heads use
        key, value = (t.repeat_interleave(u // kv_heads, dim=1) for t in (key, value))
    q, k, v = (_SeqToHeads.apply(t, group) for t in (query, key, value))
    groups = q.shape[1] // k.shape[1]
    local = module if groups == getattr(module, "num_key_value_groups", 1) else _LocalHeads(module, groups)
    if "position_ids" in kwargs:
        kwargs["position_ids"] = context.position_ids
    out, _ = _kernel(context.kernel, module)(local, q, k, v, context.mask, **kwargs)  # (B, S, H/U, D)
    out = _HeadsToSeq.apply(out.transpose(1, 2), group)  # (B, H, S/U, D)
    assert out.shape[1] == heads
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, ulysses_attention)


def enable_ulysses(model: torch.nn.Module, size: int) -> tuple[UlyssesGroup, str]:
    """This rank's group, and the HF module's attention switched to `roll_ulysses` (collective: every rank of
    the role calls it); returns the group and the kernel the wrapper calls."""
    config = model.config
    check_model(size, config)
    kernel = config._attn_implementation or "eager"
    if kernel == ATTENTION_NAME:
        raise ValueError("the model is already set up for Ulysses")
    group = new_group(size)
    register()
    config._attn_implementation = ATTENTION_NAME
    return group, kernel


def _full_mask(model_config, kernel: str, input_ids, attention_mask, position_ids, dtype):
    """The mask the unsplit forward's attention gets (transformers' own mask code, for `kernel`); with no
    attention_mask (a packed row) transformers reads the rows' boundaries from the position ids."""
    import copy

    from transformers.masking_utils import create_causal_mask

    config = copy.copy(model_config)
    config._attn_implementation_internal = kernel
    rows, width = input_ids.shape
    embeds = torch.empty((rows, width, 0), dtype=dtype, device=input_ids.device)  # read for its shape and dtype
    return create_causal_mask(
        config=config,
        inputs_embeds=embeds,
        attention_mask=attention_mask,
        past_key_values=None,
        position_ids=position_ids,
    )


def _split_forward(model, input_ids, attention_mask, position_ids, group: UlyssesGroup, kernel: str, dtype):
    """(rows, L, V) logits of the whole sequence on every rank of the group, each rank having run its 1/U slice
    (the sequence right-padded to a multiple of U: padding is masked as keys, or its own packed row, and lies
    to the right of every real query; its logits are dropped)."""
    used = input_ids.shape[1]
    pad = -used % group.size
    if pad:
        input_ids, position_ids = (torch.nn.functional.pad(t, (0, pad)) for t in (input_ids, position_ids))
        attention_mask = None if attention_mask is None else torch.nn.functional.pad(attention_mask, (0, pad))
    config = model.config if hasattr(model, "config") else model.module.config
    mask = _full_mask(config, kernel, input_ids, attention_mask, position_ids, dtype)
    context = UlyssesContext(group, kernel, mask, position_ids)
    span = input_ids.shape[1] // group.size
    local = slice(group.rank * span, (group.rank + 1) * span)
    logits = model(
        input_ids=input_ids[:, local],
        position_ids=position_ids[:, local],
        attention_mask=None,
        use_cache=False,
        **{CONTEXT_KWARG: context},
    ).logits
    return _GatherSequence.apply(logits, group)[:, :used]


def ulysses_logits(model, micro: DataProto, device, group: UlyssesGroup, kernel: str, dtype, packing: bool):
    """hf_logits under Ulysses: the same (rows, T, V) logits (zeros in cut columns / at padding positions) on
    every rank of the group, from the micro-batch's real columns or, with `packing`, its one packed row.
    Differentiable."""
    if packing:
        input_ids, position_ids = pack(micro)
        packed = _split_forward(model, input_ids.to(device), None, position_ids.to(device), group, kernel, dtype)
        return unpack(packed, micro)
    width, cols = micro.batch["attention_mask"].shape[1], real_columns(micro.batch["attention_mask"])
    inputs = {key: micro.batch[key][:, cols].to(device) for key in FORWARD_KEYS}
    logits = _split_forward(
        model, inputs["input_ids"], inputs["attention_mask"], inputs["position_ids"], group, kernel, dtype
    )
    if cols.stop - cols.start == width:
        return logits
    return torch.nn.functional.pad(logits, (0, 0, cols.start, width - cols.stop))
