"""`agg_loss`: a per-token loss matrix → one scalar (docs/algorithms.md §4, verl's newest semantics)."""

from roll.algorithms.reductions import masked_sum

__all__ = ["agg_loss", "LOSS_AGG_MODES"]

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _row_losses(loss_mat, loss_mask, per_token_mean: bool):
    row_sums = masked_sum(loss_mat, loss_mask, axis=-1)
    if per_token_mean:
        row_sums = row_sums / (loss_mask.sum(dim=-1) + 1e-8)
    return row_sums


def agg_loss(
    loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None
):
    """Aggregate (B, T) → scalar. `dp_size`, `batch_num_tokens` (global valid-token count) and
    `global_batch_size` (global non-empty row count) make the per-rank losses sum to the global mean;
    defaults give the local mean. Empty rows never count in the sequence modes.

    Deviation from verl: with nothing valid and no explicit count, the result is 0 (zero gradient) instead
    of 0/0 = NaN. It stays attached to the graph so `backward()` still works.
    """
    if loss_agg_mode == "token-mean":
        total = masked_sum(loss_mat, loss_mask)
        if batch_num_tokens is None:
            batch_num_tokens = loss_mask.sum()
            if batch_num_tokens == 0:
                return total  # exactly 0: every entry was masked out
        return total / batch_num_tokens * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        row_losses = _row_losses(loss_mat, loss_mask, loss_agg_mode == "seq-mean-token-mean")
        non_empty = loss_mask.sum(dim=-1) > 0
        total = (row_losses * non_empty).sum()
        if global_batch_size is None:
            global_batch_size = non_empty.sum()
            if global_batch_size == 0:
                return total  # exactly 0: no row has a valid token
        return total / global_batch_size * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        # Dr.GRPO: a constant divisor (the padded length unless given); no dp_size factor, as in verl.
        scale = loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
        return masked_sum(loss_mat, loss_mask) / scale
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; valid: {list(LOSS_AGG_MODES)}")
