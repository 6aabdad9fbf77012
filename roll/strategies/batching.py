"""Token-budget micro-batches (dynamic batching) and sequence packing for the forwards of HF modules.

Dynamic batching: a batch's rows are grouped so that no micro-batch holds more than
`max_tokens_per_microbatch_in_{train,infer}` real tokens (attention_mask sum), by first-fit decreasing
over the row lengths; scoring outputs are put back in the batch's row order.

Sequence packing: the real tokens of a micro-batch's rows become one row without padding, with the rows'
own position ids (0..n-1 each). With `attention_mask=None` and no KV cache, transformers (masking_utils,
5.x) derives the block-diagonal causal mask from where the position ids restart — for sdpa, eager and
flash-attention (varlen) alike — so every token attends to exactly the tokens it sees in the padded batch.
Logits are scattered back to the padded (rows, T, V) layout, zeros at padding positions, so losses and
scoring code see the same shapes either way.

Padding to the longest row: without packing, a micro-batch's forward runs on the columns that hold a real
token in some row (`real_columns`: the left padding every prompt shares and the right padding every response
shares are cut), and its logits are padded back with zeros to the batch's width. Cut columns hold no real
token, and real tokens attend only to real tokens (attention mask, causal order; position ids travel with
the tokens), so the real positions' logits are the full-width ones up to float rounding of the shorter
attention reductions.
"""

import torch

from roll.distributed.data_proto import DataProto
from roll.strategies import vl_forward

FORWARD_KEYS = ("input_ids", "attention_mask", "position_ids")


def row_lengths(batch: DataProto) -> list[int]:
    return batch.batch["attention_mask"].sum(dim=-1).tolist()


def token_budget_groups(lengths: list[int], budget: int, key: str, min_groups: int = 1) -> list[list[int]]:
    """Row indices per micro-batch, each group's token sum ≤ `budget` (first-fit decreasing), at least
    `min_groups` groups (the fullest group by rows is halved until there are enough; halves stay within the
    budget). Groups are ordered by their first row; rows inside a group keep the batch order."""
    if budget is None or budget < 1:
        raise ValueError(f"{key}={budget!r}: dynamic batching needs a token budget ≥ the longest row")
    if lengths and max(lengths) > budget:
        raise ValueError(
            f"{key}={budget} is smaller than a row of {max(lengths)} tokens; set it to at least "
            f"prompt_length + response_length"
        )
    order = sorted(range(len(lengths)), key=lambda row: (-lengths[row], row))
    groups: list[list[int]] = []
    loads: list[int] = []
    for row in order:
        for index, load in enumerate(loads):
            if load + lengths[row] <= budget:
                groups[index].append(row)
                loads[index] += lengths[row]
                break
        else:
            groups.append([row])
            loads.append(lengths[row])
    while len(groups) < min_groups:
        fullest = max(range(len(groups)), key=lambda index: len(groups[index]))
        rows = groups.pop(fullest)
        if len(rows) < 2:
            raise ValueError(f"cannot form {min_groups} micro-batches from {len(lengths)} rows")
        groups += [rows[: len(rows) // 2], rows[len(rows) // 2 :]]
    return sorted(sorted(group) for group in groups)


def max_over_ranks(value: int) -> int:
    """The largest `value` over all ranks (a collective when a process group with > 1 rank exists)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    count = torch.tensor([value], dtype=torch.long)
    if dist.get_backend() == "nccl":
        count = count.cuda()
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count.item())


def scoring_micro_batches(config, batch: DataProto) -> tuple[list[DataProto], torch.Tensor | None]:
    """The micro-batches of a scoring pass and the row order they hold (None = the batch's own order):
    `infer_batch_size` rows each, or token-budget groups with use_dynamic_batching_in_infer."""
    if not config.use_dynamic_batching_in_infer:
        size = config.infer_batch_size
        return [batch[slice(start, start + size)] for start in range(0, len(batch), size)], None
    groups = token_budget_groups(
        row_lengths(batch),
        config.max_tokens_per_microbatch_in_infer,
        f"{config.name}.max_tokens_per_microbatch_in_infer",
    )
    return [batch[group] for group in groups], torch.tensor([row for group in groups for row in group])


def restore_order(rows: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """Rows computed in `order` (see scoring_micro_batches) back in the batch's order."""
    if order is None:
        return rows
    out = torch.empty_like(rows)
    out[order] = rows
    return out


def train_micro_batches(config, batch: DataProto) -> list[DataProto]:
    """Token-budget micro-batches of one train_step, the same number on every rank (the largest any rank
    needs): data-parallel engines run one backward per micro-batch with gradient collectives inside, and
    global_batch_info's dp_size must be the same everywhere for the step's loss to be exact."""
    key = f"{config.name}.max_tokens_per_microbatch_in_train"
    budget, lengths = config.max_tokens_per_microbatch_in_train, row_lengths(batch)
    count = max_over_ranks(len(token_budget_groups(lengths, budget, key)))
    return [batch[group] for group in token_budget_groups(lengths, budget, key, min_groups=count)]


def pack(micro: DataProto) -> tuple[torch.Tensor, torch.Tensor]:
    """(1, N) input ids and position ids of the micro-batch's real tokens, row after row."""
    mask = micro.batch["attention_mask"].bool()
    positions = micro.batch["position_ids"][mask]
    expected = (mask.long().cumsum(dim=-1) - 1)[mask]
    if not torch.equal(positions, expected):  # packed rows are told apart by their position ids restarting at 0
        raise ValueError(
            "use_sequence_packing needs each row's real tokens to be contiguous with position ids "
            "0..n-1 (left-padded prompt + right-padded response)"
        )
    return micro.batch["input_ids"][mask].unsqueeze(0), positions.unsqueeze(0)


def real_columns(attention_mask: torch.Tensor) -> slice:
    """The columns from the first to the last one where some row has a real token (all columns if none has)."""
    used = attention_mask.bool().any(dim=0).nonzero()
    if not len(used):
        return slice(0, attention_mask.shape[1])
    return slice(int(used[0]), int(used[-1]) + 1)


def hf_logits(model, micro: DataProto, device, packing: bool) -> torch.Tensor:
    """(rows, T, V) logits of an HF module (or an engine wrapping one) for a padded micro-batch: the forward
    runs on the micro-batch's `real_columns` only (padded to its longest row) and the logits come back at the
    full width T, zeros in the cut columns; with `packing` computed on one packed row and scattered back
    (zeros at padding positions). Differentiable either way."""
    vision = vl_forward.is_vl_batch(micro)
    if not packing:
        width, cols = micro.batch["attention_mask"].shape[1], real_columns(micro.batch["attention_mask"])
        inputs = {key: micro.batch[key][:, cols].to(device) for key in FORWARD_KEYS}
        if vision:  # pixel values and the (4, rows, width) M-RoPE position ids
            inputs.update(vl_forward.padded_vision_inputs(model, micro, cols, device))
        logits = model(**inputs, use_cache=False).logits
        if cols.stop - cols.start == width:
            return logits
        return torch.nn.functional.pad(logits, (0, 0, cols.start, width - cols.stop))
    input_ids, position_ids = pack(micro)
    inputs = {"input_ids": input_ids.to(device), "position_ids": position_ids.to(device)}
    if vision:  # channel 0 of the (4, 1, N) position ids restarts per row: transformers reads packing from it
        inputs.update(vl_forward.packed_vision_inputs(model, micro, device))
    # attention_mask=None and use_cache=False: the conditions under which transformers reads packing from
    # the position ids (a padding mask or a cache would switch that off)
    packed = model(**inputs, attention_mask=None, use_cache=False).logits
    return unpack(packed, micro)


def unpack(packed: torch.Tensor, micro: DataProto) -> torch.Tensor:
    """(1, N, V) outputs of a packed row back at the micro-batch's real positions of a zero (rows, T, V) tensor."""
    mask = micro.batch["attention_mask"].bool().to(packed.device)
    out = packed.new_zeros(*mask.shape, packed.shape[-1])
    out[mask] = packed[0]
    return out
