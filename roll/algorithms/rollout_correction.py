"""Rollout correction, head semantics (docs/rollout_correction.md §7.6): truncated IS weights plus KL-style rejection.

Compared with the seed (`rollout_is.py`): no geometric level, no lower threshold (L = 1/U for the
metrics only), no veto; optional batch normalisation of the weights; rejection acts on the returned
response mask only and never touches the weights. Weight statistics and the off-policy diagnostics
are the seed helpers, so both versions report identical numbers for identical inputs.
"""

import math

import torch
import torch.distributed as dist

from roll.algorithms.reductions import masked_mean, masked_sum
from roll.algorithms.rollout_is import (
    SAFETY_BOUND,
    check_log_prob_inputs,
    is_weight_metrics,
    level_log_ratio,
    offpolicy_metrics,
    safe_weights,
    to_floats,
)

__all__ = ["compute_rollout_correction_and_rejection_mask", "ROLLOUT_RS_OPTIONS"]

CORRECTION_IS_LEVELS = ("token", "sequence")
ROLLOUT_RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)


# ----------------------------------------------------------------------------- IS weights


def _all_reduce_parts(numerator, denominator):
    """Sum numerator and denominator over the data-parallel group, so every rank divides by the same mean."""
    if dist.is_available() and dist.is_initialized():
        parts = torch.stack([numerator, denominator]).to(torch.float64)
        dist.all_reduce(parts)
        numerator, denominator = parts[0], parts[1]
    return numerator, denominator


def _batch_norm_factor(weights, response_mask, level):
    """Mean truncated weight: over valid tokens (token level) or over non-empty rows (sequence level)."""
    if level == "token":
        numerator, denominator = _all_reduce_parts(
            masked_sum(weights, response_mask), response_mask.sum().to(weights.dtype)
        )
        return numerator / (denominator + 1e-8)
    row_weights = masked_mean(weights, response_mask, axis=-1)
    non_empty = (response_mask.sum(dim=-1) > 0).to(weights.dtype)
    numerator, denominator = _all_reduce_parts((row_weights * non_empty).sum(), non_empty.sum())
    return numerator / denominator.clamp(min=1e-8)


def _correction_weights(log_ratio, response_mask, level, threshold, batch_normalize):
    if level not in CORRECTION_IS_LEVELS:
        raise ValueError(f"unknown rollout_is {level!r}; valid: {list(CORRECTION_IS_LEVELS)} or None")
    if threshold is None or not float(threshold) > 0:
        raise ValueError(f"rollout_is_threshold must be > 0 when rollout_is is set, got {threshold}")
    upper = float(threshold)
    level_ratio = level_log_ratio(log_ratio, response_mask, level)
    weights = safe_weights(level_ratio, log_ratio) * response_mask
    metrics = is_weight_metrics(weights, level_ratio, response_mask, level, upper, 1.0 / upper)
    weights = weights.clamp(max=upper)
    if batch_normalize:
        factor = _batch_norm_factor(weights, response_mask, level)
        if factor > 1e-8:
            weights = weights / factor.to(weights.dtype)
            metrics["rollout_is_batch_norm_factor"] = factor
        else:  # all weights (numerically) zero: leave them, report a neutral divisor
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return weights, metrics


# ----------------------------------------------------------------------------- rejection


def _parse_options(rollout_rs):
    if not isinstance(rollout_rs, str):
        raise ValueError(f"rollout_rs must be a comma-separated string of options, got {rollout_rs!r}")
    options = []
    for option in (part.strip() for part in rollout_rs.split(",")):
        if not option:
            continue
        if option not in ROLLOUT_RS_OPTIONS:
            raise ValueError(f"unknown rollout_rs option {option!r}; valid: {list(ROLLOUT_RS_OPTIONS)}")
        if option not in options:  # duplicates would only repeat the same metrics
            options.append(option)
    if not options:
        raise ValueError("rollout_rs names no option")
    return options


def _positive(text, option):
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"rollout_rs_threshold {text!r} for {option} is not a number") from None
    if not value > 0:
        raise ValueError(f"rollout_rs_threshold for {option} must be > 0, got {text}")
    return value


def _option_bounds(option, spec):
    """(lo, hi) in statistic space: k1 bounds are log-ratio bounds, k2/k3 have an upper bound only."""
    if option.endswith("k1"):
        lo_text, hi_text = spec.split("_", 1) if "_" in spec else (None, spec)
        hi = _positive(hi_text, option)
        lo = 1.0 / hi if lo_text is None else _positive(lo_text, option)
        return math.log(lo), math.log(hi)
    if "_" in spec:
        raise ValueError(f"rollout_rs_threshold {spec!r} for {option}: only k1 options take 'lower_upper' bounds")
    return None, _positive(spec, option)


def _parse_thresholds(options, rollout_rs_threshold):
    if rollout_rs_threshold is None:
        raise ValueError("rollout_rs_threshold must be set when rollout_rs is set")
    if isinstance(rollout_rs_threshold, bool) or not isinstance(rollout_rs_threshold, (int, float, str)):
        raise ValueError(f"rollout_rs_threshold must be a number or a string, got {rollout_rs_threshold!r}")
    specs = [part.strip() for part in str(rollout_rs_threshold).split(",") if part.strip()]
    if len(specs) == 1:
        specs = specs * len(options)
    if len(specs) != len(options):
        raise ValueError(
            f"rollout_rs_threshold gives {len(specs)} thresholds for {len(options)} options "
            f"{options}; give one shared threshold or one per option"
        )
    return [_option_bounds(option, spec) for option, spec in zip(options, specs)]


def _token_divergences(log_ratio):
    """k1 = log(π_rollout/π_train), k2 = ½ℓ², k3 = e^ℓ − 1 − ℓ on the ±20-clamped log-ratio ℓ."""
    bounded = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {"k1": -bounded, "k2": 0.5 * bounded.square(), "k3": torch.exp(bounded) - 1.0 - bounded}


def _row_max(values, response_mask):
    row_max = values.masked_fill(~response_mask.bool(), float("-inf")).max(dim=-1).values
    return torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)  # empty row → 0


def _option_statistic(option, divergences, response_mask):
    """(S broadcast to (B, T), per-row value or None for token options)."""
    token_stat = divergences[option[-2:]]
    if option.startswith("token_"):
        return token_stat, None
    if option.startswith("seq_sum_"):
        row = masked_sum(token_stat, response_mask, axis=-1)
    elif option.startswith("seq_mean_"):
        row = masked_mean(token_stat, response_mask, axis=-1)
    else:
        row = _row_max(token_stat, response_mask)
    return row.unsqueeze(-1).expand_as(token_stat), row


def _rows_losing_tokens(keep, response_mask):
    return ((1.0 - keep) * response_mask).sum(dim=-1) > 0


def _option_metrics(stat, row_stat, keep, response_mask, lo, hi):
    """The per-option table of docs/rollout_correction.md §7.6. R′ = non-empty rows; row fractions for
    sequence-level options."""
    valid = response_mask.bool()
    non_empty = valid.any(dim=-1)
    q = (masked_mean(stat, response_mask, axis=-1) if row_stat is None else row_stat)[non_empty]
    is_k1 = lo is not None
    if row_stat is None:
        high = masked_mean((stat > hi).float(), response_mask)
        low = masked_mean((stat < lo).float(), response_mask) if is_k1 else 0.0
    else:
        high = (q > hi).float().mean()
        low = (q < lo).float().mean() if is_k1 else 0.0
    if response_mask.sum() > 1:  # statistic clamped to its acceptance interval, as the IS-weight std
        clamped = stat.clamp(min=lo if is_k1 else 0.0, max=hi)
        variance = masked_mean(clamped.square(), response_mask) - masked_mean(clamped, response_mask).square()
        std = torch.sqrt(torch.clamp(variance, min=0.0))
    else:
        std = 0.0
    metrics = {
        "mean": masked_mean(stat, response_mask),
        "max": stat[valid].max(),
        "min": stat[valid].min(),
        "fraction_high": high,
        "fraction_low": low,
        "std": std,
        "seq_mean": q.mean(),
        "seq_std": q.std() if q.numel() > 1 else 0.0,
        "seq_max": q.max(),
        "seq_min": q.min(),
        "seq_max_deviation": q.abs().max(),  # distance from 0, the divergence of identical policies
        "seq_fraction_high": (q > hi).float().mean(),
    }
    if is_k1:
        metrics["seq_fraction_low"] = (q < lo).float().mean()
    metrics["masked_fraction"] = masked_mean(1.0 - keep, response_mask)
    metrics["seq_masked_fraction"] = _rows_losing_tokens(keep, response_mask)[non_empty].float().mean()
    return metrics


def _rejection_mask(log_ratio, response_mask, rollout_rs, rollout_rs_threshold):
    options = _parse_options(rollout_rs)
    bounds = _parse_thresholds(options, rollout_rs_threshold)
    divergences = _token_divergences(log_ratio)
    combined = torch.ones_like(log_ratio)
    metrics = {}
    for option, (lo, hi) in zip(options, bounds):
        stat, row_stat = _option_statistic(option, divergences, response_mask)
        inside = stat <= hi if lo is None else (stat >= lo) & (stat <= hi)
        keep = inside.to(log_ratio.dtype)
        combined = combined * keep
        option_metrics = _option_metrics(stat, row_stat, keep, response_mask, lo, hi)
        metrics.update({f"rollout_rs_{option}_{name}": value for name, value in option_metrics.items()})
    metrics["rollout_rs_masked_fraction"] = masked_mean(1.0 - combined, response_mask)
    # Over all B rows, unlike the per-option fraction over non-empty rows (verl's two denominators).
    metrics["rollout_rs_seq_masked_fraction"] = _rows_losing_tokens(combined, response_mask).float().mean()
    return (response_mask * combined).to(response_mask.dtype), metrics


# ----------------------------------------------------------------------------- entry point


def _chi2_metrics(log_ratio, response_mask):
    bounded = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    seq_log_ratio = masked_sum(log_ratio, response_mask, axis=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {
        "chi2_token": masked_mean(torch.exp(bounded).square(), response_mask) - 1.0,
        "chi2_seq": torch.exp(2.0 * seq_log_ratio).mean() - 1.0,
    }


@torch.no_grad()
def compute_rollout_correction_and_rejection_mask(
    old_log_prob,
    rollout_log_prob,
    response_mask,
    rollout_is=None,
    rollout_is_threshold=2.0,
    rollout_is_batch_normalize=False,
    rollout_rs=None,
    rollout_rs_threshold=None,
):
    """Head rollout correction: returns (weights or None, modified response mask, metrics `rollout_corr/*`).

    rollout_is ∈ {None, "token", "sequence"}: weights min(ρ, U) (optionally divided by their batch mean).
    rollout_rs: comma-separated rejection options (`token_k1`, `seq_mean_k3`, ...) that must all pass;
    k1 thresholds are "lower_upper" bounds on π_rollout/π_train (a single u means the range 1/u to u).
    """
    if rollout_log_prob is None:
        raise ValueError("rollout correction needs rollout_log_prob")
    check_log_prob_inputs(old_log_prob, rollout_log_prob, response_mask)
    log_ratio = old_log_prob - rollout_log_prob
    metrics = {}
    weights = None
    if rollout_is is not None:
        weights, is_metrics = _correction_weights(
            log_ratio, response_mask, rollout_is, rollout_is_threshold, rollout_is_batch_normalize
        )
        metrics.update(is_metrics)
    modified_mask = response_mask.clone()
    if rollout_rs is not None:
        modified_mask, rs_metrics = _rejection_mask(log_ratio, response_mask, rollout_rs, rollout_rs_threshold)
        metrics.update(rs_metrics)
    metrics.update(offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask))
    metrics.update(_chi2_metrics(log_ratio, response_mask))
    return weights, modified_mask, to_floats(metrics, "rollout_corr/")
