"""Label conventions and the loss-token counts of a training step (docs/algorithms.md §13.1).

Two label conventions coexist (ROLL's): SFT's `labels` are already shifted (`labels[:, t]` is the target of
`logits[:, t]`, last column IGNORE_INDEX); distillation's `labels_for_loss` are not (`labels_for_loss[:, t]` is
token t itself or IGNORE_INDEX). The counts below are the denominators of the token-mean losses: each rank
counts its own rows, the strategy sums the counts over the data-parallel group, so every micro-batch divides
its *sum* by the same global count and the micro-batch losses add up to the global token mean.
"""

from collections.abc import Callable, Mapping, Sequence

import torch

__all__ = [
    "IGNORE_INDEX",
    "LABEL_KEYS",
    "shift_labels_left",
    "loss_token_mask",
    "count_loss_tokens",
    "count_valid_samples",
    "global_counts",
]

IGNORE_INDEX = -100  # ROLL's IGNORE_INDEX, also torch's cross_entropy default
# batch keys holding labels (IGNORE_INDEX = not a target) rather than 0/1 masks
LABEL_KEYS = ("labels", "labels_for_loss")


def shift_labels_left(labels: torch.Tensor) -> torch.Tensor:
    """L'[:, t] = L[:, t + 1], L'[:, S − 1] = IGNORE_INDEX: unshifted labels → the target of each position."""
    pad = torch.full_like(labels[..., :1], IGNORE_INDEX)
    return torch.cat([labels[..., 1:], pad], dim=-1)


def loss_token_mask(key: str, values: torch.Tensor) -> torch.Tensor:
    """The entries of batch key `key` that count as loss tokens (bool for labels, the mask's own values else).

    `labels`: every entry ≠ IGNORE_INDEX. `labels_for_loss`: only columns 1 … S−1 (a label at column 0 is a
    token no position predicts; ROLL also counts it, this project does not: the CE and the divergence never
    see it). `response_mask`: columns 1 … S−1 (the token axis). Any other key: the mask as it is."""
    if key == "labels":
        return values != IGNORE_INDEX
    if key == "labels_for_loss":
        return values[..., 1:] != IGNORE_INDEX
    if key == "response_mask":
        return values[..., 1:]
    return values


def _check_keys(loss_mask_keys) -> list:
    if not isinstance(loss_mask_keys, list | tuple) or not all(isinstance(k, str) for k in loss_mask_keys):
        raise TypeError(f"loss_mask_keys must be a list of batch key names, got {loss_mask_keys!r}")
    return list(loss_mask_keys)


def count_loss_tokens(batch: Mapping[str, torch.Tensor], loss_mask_keys: Sequence[str]) -> dict:
    """This rank's loss-token count per key of `loss_mask_keys` present in `batch` (absent keys are skipped).

    Returns {key: 0-d tensor}. The caller turns them into the global counts of the optimizer step with
    `global_counts` (summed over the data-parallel group, 0 → 1); `loss_mask_keys=[]` gives {}."""
    return {key: loss_token_mask(key, batch[key]).sum() for key in _check_keys(loss_mask_keys) if key in batch}


def count_valid_samples(batch: Mapping[str, torch.Tensor], loss_mask_keys: Sequence[str], rows: int) -> dict:
    """This rank's sample counts: "default" = `rows` (all rows), and per present key the rows with at least one
    loss token (same column rules as `count_loss_tokens`)."""
    out = {"default": torch.tensor(rows)}
    for key in _check_keys(loss_mask_keys):
        if key in batch:
            out[key] = (loss_token_mask(key, batch[key]) > 0).any(dim=-1).sum()
    return out


def global_counts(
    local: Mapping[str, torch.Tensor], all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None, replicas=1
) -> dict:
    """Local counts → the global counts every micro-batch loss divides by: {key: int ≥ 1}.

    Contract for the strategies: call `count_loss_tokens` / `count_valid_samples` on the rank's whole
    optimizer-step shard (all its micro-batches), then this with `all_reduce` = a function that sums a 1-D
    float64 CPU tensor over the data-parallel group and returns the sum (e.g. move to the device,
    `torch.distributed.all_reduce`, move back); None = one rank. When several ranks of that group hold the same
    rows (context parallelism with full labels on every CP rank), pass `replicas` = how many ranks hold each
    row: the sum is divided by it. A total of 0 becomes 1 (nothing to learn: the losses are 0, never 0/0)."""
    keys = list(local)
    if not keys:
        return {}
    stacked = torch.stack([torch.as_tensor(local[k]).detach().to("cpu", torch.float64) for k in keys])
    if all_reduce is not None:
        stacked = all_reduce(stacked)
    out = {}
    for key, total in zip(keys, stacked.tolist(), strict=True):
        count = round(total)
        if count % replicas:
            raise ValueError(f"global_counts: {key} sums to {count}, not a multiple of replicas={replicas}")
        out[key] = max(count // replicas, 1)
    return out
