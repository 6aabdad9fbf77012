"""Rollout importance sampling, seed semantics (docs/rollout_correction.md §7.1–7.5).

The inference engine samples with π_rollout while the trainer scores the same tokens with π_train
(`old_log_prob`). Their per-token log-ratio ℓ = old − rollout drives an IS weight (token, sequence or
geometric level) that is truncated or clipped at thresholds, a per-sequence veto for catastrophic
tokens, and a set of diagnostics. The head module (`rollout_correction.py`) reuses the weight and
metric helpers defined here so the two versions cannot drift apart.

Why two modules: verl changed this maths between the two versions (head drops the geometric level, the lower
threshold and the veto, and adds rejection and batch normalisation), so the same inputs give different numbers.
The pipeline's `rollout_is*` keys select this one; the head function is library API (`roll.algorithms`) for code
ported from verl head, checked against head's numbers. One entry point would need a version switch no config has.
"""

import torch

from roll.algorithms.reductions import masked_mean, masked_sum

__all__ = ["compute_rollout_importance_weights", "compute_mismatch_metrics"]

# exp(±20) keeps every weight finite in float32 (exp(20) ≈ 4.9e8) without changing realistic ratios.
SAFETY_BOUND = 20.0
IS_LEVELS = ("token", "sequence", "geometric")
# "clip" is the seed name; "mask" the later name of the same maths (only metric names differ).
IS_MODES = ("truncate", "clip", "mask")
PERCENTILES = (25, 50, 75, 95, 99)


# ----------------------------------------------------------------------------- shared helpers


def check_log_prob_inputs(old_log_prob, rollout_log_prob, response_mask):
    """Shape and non-empty checks shared by the seed and head entry points."""
    if rollout_log_prob is not None and rollout_log_prob.shape != old_log_prob.shape:
        raise ValueError(
            f"rollout_log_prob shape {tuple(rollout_log_prob.shape)} does not match "
            f"old_log_prob shape {tuple(old_log_prob.shape)}"
        )
    if response_mask.shape != old_log_prob.shape:
        raise ValueError(
            f"response_mask shape {tuple(response_mask.shape)} does not match "
            f"old_log_prob shape {tuple(old_log_prob.shape)}"
        )
    if not response_mask.bool().any():
        raise ValueError("response_mask has no valid token; rollout IS metrics are undefined for an empty batch")


def level_log_ratio(log_ratio, response_mask, level):
    """Λ: the per-token log-ratio (token level) or one value per row, shape (B, 1)."""
    if level == "token":
        return log_ratio
    if level == "sequence":  # log of the product of the token ratios
        return masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)
    if level == "geometric":  # log of their geometric mean; an empty row gives 0
        return masked_mean(log_ratio, response_mask, axis=-1).unsqueeze(-1)
    raise ValueError(f"unknown rollout IS level {level!r}; valid: {list(IS_LEVELS)}")


def safe_weights(level_ratio, like):
    """exp(clamp(Λ, ±20)) broadcast to the (B, T) shape of `like`."""
    return torch.exp(level_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(like)


def _log_threshold(value, like):
    # Same dtype as Λ so a ratio exactly at the threshold compares as it does in the weight space.
    return torch.log(torch.tensor(value, dtype=like.dtype, device=like.device))


def _masked_extreme(values, mask, largest):
    fill = float("-inf") if largest else float("inf")
    filled = values.masked_fill(~mask.bool(), fill)
    return filled.max() if largest else filled.min()


def _clamped_std_and_ess(weights, mask, upper, lower):
    """Population std and normalised ESS of the weights clamped to [L, U] (clamping keeps the squares finite)."""
    clamped = weights.clamp(min=lower, max=upper)
    mean = masked_mean(clamped, mask)
    if mask.sum() > 1:
        std = torch.sqrt(torch.clamp(masked_mean(clamped.square(), mask) - mean.square(), min=0.0))
    else:
        std = 0.0
    normalised = clamped / (mean + 1e-8)
    return std, 1.0 / masked_mean(normalised.square(), mask)


def _row_mean_metrics(weights, mask, upper, lower, prefix):
    """Per-row mean weight q_i over all B rows (an empty row has q = 0 and counts as low)."""
    q = masked_mean(weights, mask, axis=-1)
    return {
        f"{prefix}_seq_mean": q.mean(),
        f"{prefix}_seq_std": q.std() if q.numel() > 1 else 0.0,
        f"{prefix}_seq_max": q.max(),
        f"{prefix}_seq_min": q.min(),
        f"{prefix}_seq_max_deviation": (q - 1.0).abs().max(),
        f"{prefix}_seq_fraction_high": (q > upper).float().mean(),
        f"{prefix}_seq_fraction_low": (q < lower).float().mean(),
    }


def is_weight_metrics(weights, level_ratio, response_mask, level, upper, lower, prefix="rollout_is"):
    """The weight statistics of docs/rollout_correction.md §7.3 (no veto, no percentiles) on the safety-bounded,
    untruncated weights.

    `level_ratio` is Λ from `level_log_ratio`; for sequence/geometric levels max/min and the threshold
    fractions are read in log space so they stay exact beyond the safety bound.
    """
    metrics = {f"{prefix}_mean": masked_mean(weights, response_mask)}
    if level == "token":
        metrics[f"{prefix}_ratio_fraction_high"] = masked_mean((weights > upper).float(), response_mask)
        metrics[f"{prefix}_ratio_fraction_low"] = masked_mean((weights < lower).float(), response_mask)
        metrics[f"{prefix}_max"] = _masked_extreme(weights, response_mask, largest=True)
        metrics[f"{prefix}_min"] = _masked_extreme(weights, response_mask, largest=False)
    else:
        # Λ has one entry per row, empty rows (Λ = 0) included, as in verl.
        metrics[f"{prefix}_max"] = torch.exp(level_ratio.max().clamp(max=SAFETY_BOUND))
        metrics[f"{prefix}_min"] = torch.exp(level_ratio.min())
        high = (level_ratio > _log_threshold(upper, level_ratio)).float()
        low = (level_ratio < _log_threshold(lower, level_ratio)).float()
        if level == "sequence":  # row fractions
            metrics[f"{prefix}_ratio_fraction_high"] = high.mean()
            metrics[f"{prefix}_ratio_fraction_low"] = low.mean()
        else:  # geometric: token-weighted fractions
            metrics[f"{prefix}_ratio_fraction_high"] = masked_mean(high.expand_as(response_mask), response_mask)
            metrics[f"{prefix}_ratio_fraction_low"] = masked_mean(low.expand_as(response_mask), response_mask)
    std, ess = _clamped_std_and_ess(weights, response_mask, upper, lower)
    metrics[f"{prefix}_std"] = std
    metrics[f"{prefix}_eff_sample_size"] = ess
    metrics.update(_row_mean_metrics(weights, response_mask, upper, lower, prefix))
    return metrics


def offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask):
    """docs/rollout_correction.md §7.4 statistics with bare names (`training_ppl`, `kl`, ...); rollout-dependent
    ones need rollout."""
    train_mean = masked_mean(old_log_prob, response_mask, axis=-1)  # empty row → 0, kept in the means
    metrics = {"training_ppl": torch.exp(-train_mean).mean(), "training_log_ppl": (-train_mean).mean()}
    if rollout_log_prob is None:
        return metrics
    log_ratio = old_log_prob - rollout_log_prob
    rollout_mean = masked_mean(rollout_log_prob, response_mask, axis=-1)
    diff = rollout_mean - train_mean  # per-row log(ppl_train / ppl_rollout)
    metrics.update(
        {
            "kl": masked_mean(-log_ratio, response_mask),
            "k3_kl": masked_mean(torch.exp(log_ratio) - log_ratio - 1, response_mask),  # unclamped, as verl
            "rollout_ppl": torch.exp(-rollout_mean).mean(),
            "rollout_log_ppl": (-rollout_mean).mean(),
            "log_ppl_diff": diff.mean(),
            "log_ppl_abs_diff": diff.abs().mean(),
            "log_ppl_diff_max": diff.max(),
            "log_ppl_diff_min": diff.min(),
            "ppl_ratio": torch.exp(diff).mean(),
        }
    )
    return metrics


def to_floats(metrics, prefix=""):
    return {f"{prefix}{key}": float(value) for key, value in metrics.items()}


# ----------------------------------------------------------------------------- seed-only pieces


def _thresholds(upper, lower, veto):
    """(U, L) as floats, L = 1/U unless given; rejects values whose logs or reciprocals are meaningless."""
    upper = float(upper)
    if not upper > 0:
        raise ValueError(f"rollout_is_threshold must be > 0, got {upper}")
    lower = 1.0 / upper if lower is None else float(lower)
    if not lower >= 0:
        raise ValueError(f"rollout_is_threshold_lower must be >= 0, got {lower}")
    if veto is not None and not veto >= 0:
        raise ValueError(f"rollout_is_veto_threshold must be >= 0, got {veto}")
    return upper, lower


def _veto(log_ratio, response_mask, veto_threshold):
    """(catastrophic tokens, rows that have one). Raw, unclamped ℓ; padded positions never count."""
    if veto_threshold is None:
        catastrophic = torch.zeros_like(response_mask, dtype=torch.bool)
    else:
        catastrophic = (log_ratio < _log_threshold(veto_threshold, log_ratio)) & response_mask.bool()
    return catastrophic, catastrophic.any(dim=-1, keepdim=True)


def _percentiles(weights, response_mask):
    """Linear-interpolation quantiles (torch.quantile's default) via a sort: no input-size limit."""
    values = torch.sort(weights[response_mask.bool()].float()).values
    last = values.numel() - 1
    out = {}
    for pct in PERCENTILES:
        position = pct / 100 * last
        below = int(position)
        above = min(below + 1, last)
        out[f"rollout_is_p{pct}"] = torch.lerp(values[below], values[above], position - below)
    return out


def _keep_metrics(keep, unit_keep, response_mask, level, mode):
    """Fractions zeroed by clip/mask mode, under the key names of the mode actually requested."""
    name = "clipped" if mode == "clip" else "masked"
    if level == "token":  # a row counts once it loses any valid token
        row_hit = (masked_sum(1.0 - keep, response_mask, axis=-1) > 0).float()
    else:  # one decision per row, empty rows included (their weight is 1)
        row_hit = 1.0 - unit_keep
    return {
        f"rollout_is_{name}_fraction": masked_mean(1.0 - keep, response_mask),
        f"rollout_is_seq_{name}_fraction": row_hit.mean(),
    }


@torch.no_grad()
def compute_rollout_importance_weights(
    old_log_prob,
    rollout_log_prob,
    response_mask,
    rollout_is_level="token",
    rollout_is_mode="truncate",
    rollout_is_threshold=None,
    rollout_is_threshold_lower=None,
    rollout_is_veto_threshold=1e-4,
):
    """Seed rollout IS: returns (weights (B, T) or None, metrics prefixed `mismatch/`).

    truncate caps weights at U (no lower bound); clip/mask zeroes weights outside [L, U] (L = 1/U by
    default); the veto zeroes every row holding a valid token with π_train/π_rollout < veto threshold.
    Metrics describe the weights before truncation and veto. The response mask is never changed.
    """
    if rollout_is_threshold is None:  # the main switch: nothing computed at all
        return None, {}
    if rollout_is_level not in IS_LEVELS:
        raise ValueError(f"unknown rollout_is_level {rollout_is_level!r}; valid: {list(IS_LEVELS)}")
    if rollout_is_mode not in IS_MODES:
        raise ValueError(f"unknown rollout_is_mode {rollout_is_mode!r}; valid: {list(IS_MODES)}")
    check_log_prob_inputs(old_log_prob, rollout_log_prob, response_mask)
    upper, lower = _thresholds(rollout_is_threshold, rollout_is_threshold_lower, rollout_is_veto_threshold)

    log_ratio = old_log_prob - rollout_log_prob
    level_ratio = level_log_ratio(log_ratio, response_mask, rollout_is_level)
    weights = safe_weights(level_ratio, log_ratio)
    catastrophic, has_catastrophic = _veto(log_ratio, response_mask, rollout_is_veto_threshold)

    metrics = {
        "rollout_is_veto_fraction": has_catastrophic.float().mean(),
        "rollout_is_catastrophic_token_fraction": masked_mean(catastrophic.float(), response_mask),
    }
    metrics.update(is_weight_metrics(weights, level_ratio, response_mask, rollout_is_level, upper, lower))
    metrics.update(_percentiles(weights, response_mask))

    if rollout_is_mode == "truncate":
        weights = weights.clamp(max=upper)
    else:
        # One decision per IS unit (token, or row for sequence/geometric), then broadcast to tokens.
        unit_weights = safe_weights(level_ratio, level_ratio)
        unit_keep = ((unit_weights >= lower) & (unit_weights <= upper)).to(weights.dtype)
        keep = unit_keep.expand_as(weights)
        metrics.update(_keep_metrics(keep, unit_keep, response_mask, rollout_is_level, rollout_is_mode))
        weights = weights * keep
    weights = weights * (~has_catastrophic).to(weights.dtype) * response_mask

    metrics.update(
        {f"mismatch_{k}": v for k, v in offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask).items()}
    )
    return weights, to_floats(metrics, "mismatch/")


@torch.no_grad()
def compute_mismatch_metrics(old_log_prob, rollout_log_prob, response_mask):
    """Training/rollout perplexity and KL diagnostics (docs/rollout_correction.md §7.4), keys `mismatch_*`
    without the `mismatch/` prefix.

    `rollout_log_prob` may be None: only the training perplexities are then reported.
    """
    check_log_prob_inputs(old_log_prob, rollout_log_prob, response_mask)
    return to_floats(
        {f"mismatch_{k}": v for k, v in offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask).items()}
    )
