"""`agg_loss`: a per-token loss matrix → one scalar (spec §4, verl head semantics)."""
import torch

from roll.algorithms.reductions import masked_sum

__all__ = ["agg_loss", "LOSS_AGG_MODES"]

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None,
             loss_scale_factor=None):
    """Empty rows are excluded from the sequence modes. Deviation from verl: with nothing valid and no
    explicit global count, the result is 0.0 (zero gradient) instead of 0/0 = NaN."""
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            batch_num_tokens = loss_mask.sum()
            if batch_num_tokens == 0:
                return (loss_mat * 0).sum()
        return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        row_tokens = loss_mask.sum(dim=-1)
        row_sums = masked_sum(loss_mat, loss_mask, axis=-1)
        if loss_agg_mode == "seq-mean-token-mean":
            row_sums = row_sums / (row_tokens + 1e-8)
        non_empty = row_tokens > 0
        if global_batch_size is None:
            global_batch_size = non_empty.sum()
            if global_batch_size == 0:
                return (loss_mat * 0).sum()
        return (row_sums * non_empty).sum() / global_batch_size * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        scale = loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
        return masked_sum(loss_mat, loss_mask) / scale
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; valid: {list(LOSS_AGG_MODES)}")
