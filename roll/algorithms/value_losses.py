"""Value (critic) loss and entropy loss (docs/algorithms.md §6)."""

import torch

from roll.algorithms.aggregation import agg_loss
from roll.algorithms.reductions import clip_by_value, entropy_from_logits, masked_mean

__all__ = ["compute_value_loss", "compute_entropy_loss"]


def compute_value_loss(vpreds, returns, values, response_mask, cliprange_value, loss_agg_mode="token-mean"):
    """Clipped value loss 0.5·agg(max((v−R)², (v̂−R)²)), v̂ = v kept within ±c of the rollout values.
    Returns (vf_loss, vf_clipfrac) as tensors; clipfrac counts tokens where the clipped branch is larger.
    cliprange_value None: no clipping, 0.5·agg((v−R)²) with clipfrac 0 (ROLL's value_clip: null)."""
    if cliprange_value is None:
        vf_loss = 0.5 * agg_loss((vpreds - returns).square(), response_mask, loss_agg_mode)
        return vf_loss, torch.zeros((), dtype=vf_loss.dtype)
    clipped = clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    loss_unclipped, loss_clipped = (vpreds - returns).square(), (clipped - returns).square()
    vf_loss = 0.5 * agg_loss(torch.max(loss_unclipped, loss_clipped), response_mask, loss_agg_mode)
    vf_clipfrac = masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
    return vf_loss, vf_clipfrac


def compute_entropy_loss(logits, response_mask, loss_agg_mode="token-mean"):
    """Mean token entropy of the (B, T, V) logits, aggregated like the policy loss."""
    return agg_loss(entropy_from_logits(logits), response_mask, loss_agg_mode)
