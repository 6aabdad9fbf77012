"""SFT: the data layout's pure steps and the global-token-mean cross-entropy (docs/algorithms.md §13.2).

Layout per row: `[prompt | response | pad]`, right padded to `sequence_length`; labels are the response tokens
(IGNORE_INDEX over the prompt and the padding), shifted left by one so `labels[:, t]` is the target of
`logits[:, t]`. The loss of a micro-batch is its CE *sum* over the label tokens divided by the global label
count N of the optimizer step (`global_counts(count_loss_tokens(batch, ["labels"]))["labels"]`), so the
micro-batch losses of every rank add up to the global token mean.
"""

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from roll.algorithms.loss_tokens import IGNORE_INDEX, shift_labels_left
from roll.algorithms.reductions import float32_or_wider
from roll.utils.errors import InputError
from roll.utils.functional import compute_position_ids

__all__ = ["mask_prompt_labels", "sft_collate", "token_ce_sum", "language_loss", "sft_loss"]


def mask_prompt_labels(input_ids: Sequence[int], prompt_length: int) -> list:
    """Unshifted labels of one encoded row: IGNORE_INDEX over the first `prompt_length` tokens (the prompt
    rendered with the generation prompt), the token ids after it (the response and its end-of-turn token)."""
    ids = list(input_ids)
    if not 0 <= prompt_length <= len(ids):
        raise InputError(
            f"prompt_length={prompt_length} but the row has {len(ids)} tokens: the prompt must be a prefix of "
            "prompt + response (check the chat template)"
        )
    return [IGNORE_INDEX] * prompt_length + ids[prompt_length:]


def sft_collate(
    input_ids: Sequence[Sequence[int]], labels: Sequence[Sequence[int]], sequence_length: int, pad_token_id: int
) -> dict:
    """Rows → the SFT batch: `input_ids` (right padded with `pad_token_id`), `attention_mask`, `labels` (right
    padded with IGNORE_INDEX, then shifted left by one with IGNORE_INDEX appended) and
    `position_ids = clip(cumsum(attention_mask) − 1, 0)`, all (B, sequence_length) int64.

    A row longer than `sequence_length` is an error naming it (ROLL's collator would build ragged tensors)."""
    if len(input_ids) != len(labels):
        raise ValueError(f"sft_collate: {len(input_ids)} input_ids rows but {len(labels)} labels rows")
    rows = len(input_ids)
    ids = torch.full((rows, sequence_length), pad_token_id, dtype=torch.long)
    mask = torch.zeros((rows, sequence_length), dtype=torch.long)
    unshifted = torch.full((rows, sequence_length), IGNORE_INDEX, dtype=torch.long)
    for row, (row_ids, row_labels) in enumerate(zip(input_ids, labels, strict=True)):
        if len(row_ids) > sequence_length:
            raise InputError(
                f"SFT row {row} has {len(row_ids)} tokens (prompt + response), more than sequence_length="
                f"{sequence_length}: raise sequence_length or drop or shorten the row"
            )
        if len(row_labels) != len(row_ids):
            raise ValueError(f"sft_collate: row {row} has {len(row_ids)} input_ids but {len(row_labels)} labels")
        ids[row, : len(row_ids)] = torch.as_tensor(list(row_ids), dtype=torch.long)
        mask[row, : len(row_ids)] = 1
        unshifted[row, : len(row_labels)] = torch.as_tensor(list(row_labels), dtype=torch.long)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": shift_labels_left(unshifted),
        "position_ids": compute_position_ids(mask),
    }


def token_ce_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Σ_{b,t: labels[b,t] ≠ IGNORE_INDEX} −log softmax(logits[b,t])[labels[b,t]] with `labels` already aligned
    to `logits` (no shift here); float32 (float64 stays float64)."""
    return F.cross_entropy(
        float32_or_wider(logits).reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


def language_loss(token_losses: torch.Tensor, labels: torch.Tensor, batch_num_tokens) -> torch.Tensor:
    """Σ token_losses over labels ≠ IGNORE_INDEX / batch_num_tokens (engines that return per-token CE,
    e.g. Megatron called with the labels). Entries at ignored labels never reach the sum, NaN included."""
    valid = labels != IGNORE_INDEX
    return torch.where(valid, token_losses, torch.zeros_like(token_losses)).sum() / batch_num_tokens


def sft_loss(logits: torch.Tensor, labels: torch.Tensor, batch_num_tokens, metric_name="sft_train/loss@sum"):
    """SFT micro-batch loss Σ CE / N with the collator's shifted `labels` and N the global label count of the
    optimizer step → (loss, {metric_name: loss}). The metric is a `@sum` metric: summed over the step's
    micro-batches and ranks it is the global token-mean CE."""
    loss = token_ce_sum(logits, labels) / batch_num_tokens
    return loss, {metric_name: loss.item()}
