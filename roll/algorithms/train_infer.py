"""ROLL's train-infer correction (its `train_infer_correction`; docs/rollout_correction.md §7.7).

With ℓ = old_log_probs − rollout_log_probs per token (π_train over π_rollout of the sampled token) and
d = exp(old) − exp(rollout) (their probability difference), each is taken at one of four levels:
token (ℓ, d), segment (the mean over the token's turn: a maximal run of the mask), geometric (the mean over the
row) or sequence (the sum over the row); the ratio is exp of the level's ℓ. A filter keeps a token when the
ratio (and/or the difference) at its level lies in [low, high]; the IS weight is the ratio at its level clamped
to [0, upper_bound]. The row and segment statistics use the unfiltered response mask, as ROLL's."""

import torch

from roll.algorithms.policy_losses import segment_mean
from roll.algorithms.reductions import masked_mean, masked_sum
from roll.algorithms.rollout_is import level_log_ratio

__all__ = ["train_infer_levels", "train_infer_correction"]

LEVELS = ("token", "geometric", "sequence", "segment")


def train_infer_levels(old_log_probs, rollout_log_probs, response_mask) -> tuple[dict, dict]:
    """({level: ratio (B, T)}, {level: difference (B, T)}) at every level."""
    mask = response_mask.to(old_log_probs.dtype)
    log_ratio = old_log_probs - rollout_log_probs
    diff = old_log_probs.exp() - rollout_log_probs.exp()
    ratio = {
        level: torch.exp(level_log_ratio(log_ratio, mask, level)).expand_as(log_ratio)
        for level in ("token", "geometric", "sequence")
    }
    ratio["segment"] = torch.exp(segment_mean(log_ratio, mask))
    diffs = {
        "token": diff,
        "geometric": masked_mean(diff, mask, axis=-1).unsqueeze(-1).expand_as(diff),
        "sequence": masked_sum(diff, mask, axis=-1).unsqueeze(-1).expand_as(diff),
        "segment": segment_mean(diff, mask),
    }
    return ratio, diffs


def _row_mean_of_token_means(values, mask) -> float:
    """Mean over the rows with a valid token of each row's masked token mean (ROLL's seq-mean-token-mean)."""
    rows = mask.sum(-1) > 0
    return float(masked_mean(values, mask, axis=-1)[rows].mean()) if rows.any() else 0.0


@torch.no_grad()
def train_infer_correction(old_log_probs, rollout_log_probs, response_mask, cfg):
    """(IS weights (B, T) or None when cfg.is_weight is off, keep mask (B, T) of 0/1, metrics).

    `cfg` is a roll.configs.train_infer.TrainInferCorrectionConfig. The mean ratio and difference of every level
    are reported whatever is enabled (ROLL logs them for monitoring), each enabled filter's pass rate, and with
    any filter the share of the response tokens kept."""
    mask = response_mask.to(old_log_probs.dtype)
    ratio, diff = train_infer_levels(old_log_probs, rollout_log_probs, mask)
    metrics = {}
    for level in LEVELS:
        metrics[f"train_infer/ratio_{level}_mean"] = _row_mean_of_token_means(ratio[level], mask)
        metrics[f"train_infer/diff_{level}_mean"] = _row_mean_of_token_means(diff[level], mask)
    weights = None
    if cfg.is_weight.enabled:
        weights = ratio[cfg.is_weight.weight_type]
        bound = cfg.is_weight.upper_bound
        if bound is not None:
            metrics["train_infer/is_weight_clipfrac"] = float(masked_mean((weights > bound).float(), mask))
            weights = weights.clamp(min=0.0, max=bound)
        weights = weights * mask
    keep = torch.ones_like(mask)
    for f in cfg.filters:
        if not f.enabled:
            continue
        checks = []
        if f.ratio_enabled:
            checks.append(("ratio", ratio[f.agg_type], f.ratio_low, f.ratio_high))
        if f.diff_enabled:
            checks.append(("diff", diff[f.agg_type], f.diff_low, f.diff_high))
        for kind, values, low, high in checks:
            passed = ((values >= low) & (values <= high)).to(mask.dtype)
            metrics[f"train_infer/{f.agg_type}_{kind}_pass"] = float(masked_mean(passed, mask))
            keep = keep * passed
    if cfg.filters:
        metrics["train_infer/final_mask_mean"] = float(masked_mean(keep, mask))
    return weights, keep * mask, metrics
