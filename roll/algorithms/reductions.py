"""Masked reductions shared by every estimator and loss (docs/algorithms.md §1)."""

import torch

__all__ = ["masked_sum", "masked_mean", "masked_var", "masked_whiten", "clip_by_value", "entropy_from_logits"]


def masked_sum(values, mask, axis=None):
    # Zero the unmasked entries first so NaN/Inf on padding never leak into the sum.
    valid = torch.where(mask.bool(), values, torch.zeros_like(values)) * mask
    return valid.sum() if axis is None else valid.sum(dim=axis)


def masked_mean(values, mask, axis=None):
    denom = mask.sum() if axis is None else mask.sum(dim=axis)
    return masked_sum(values, mask, axis) / (denom + 1e-8)


def masked_var(values, mask, unbiased=True):
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        count = mask.sum()
        if count == 0:
            raise ValueError("masked_var: the mask has no valid element")
        if count == 1:
            raise ValueError("masked_var: unbiased variance needs at least 2 valid elements, got 1")
        var = var * count / (count - 1)
    return var


def masked_whiten(values, mask, shift_mean=True):
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


def clip_by_value(x, tensor_min, tensor_max):
    return torch.max(torch.min(x, tensor_max), tensor_min)


def float32_or_wider(x):
    """x in float32 (the precision ROLL computes its losses in); float64 stays float64 (gradcheck)."""
    return x if x.dtype == torch.float64 else x.float()


def entropy_from_logits(logits):
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)
