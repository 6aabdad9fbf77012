"""Dynamic sampling (DAPO-style): which prompt groups are kept for training, from their rewards.

ROLL's `rewards.<domain>.query_filter_config` (docs/algorithms.md, Dynamic sampling): a group whose
rewards carry no signal — all equal, or a mean / standard deviation outside a band — gives every sample a
zero group-normalised advantage, so it only dilutes the batch. Pure tensor maths; the pipeline decides
what to do with the dropped groups (roll.pipeline.rlvr.rollout.filtered).
"""

import math

import torch

__all__ = ["GROUP_FILTERS", "FILTER_ARGS", "keep_groups"]


def _no_filter(scores: torch.Tensor, args: dict) -> torch.Tensor:
    return torch.ones(scores.shape[0], dtype=torch.bool)


def _mean_filter(scores: torch.Tensor, args: dict) -> torch.Tensor:
    # dropped when mean <= threshold_down or mean >= threshold_up (both bounds exclusive for keeping)
    mean = scores.mean(dim=-1)
    return (mean > args.get("threshold_down", -1.0)) & (mean < args.get("threshold_up", math.inf))


def _std_filter(scores: torch.Tensor, args: dict) -> torch.Tensor:
    # dropped when the (unbiased) standard deviation <= std_threshold; 0 drops exactly the all-equal groups
    return scores.std(dim=-1, unbiased=True) > args.get("std_threshold", -1.0)


# type → (keep function, the filter_args keys it reads with their defaults)
GROUP_FILTERS = {"no_filter": _no_filter, "mean_filter": _mean_filter, "std_filter": _std_filter}
FILTER_ARGS = {
    "no_filter": {},
    "mean_filter": {"threshold_up": math.inf, "threshold_down": -1.0},
    "std_filter": {"std_threshold": -1.0},
}


def keep_groups(scores: torch.Tensor, filter_type: str, filter_args: dict) -> torch.Tensor:
    """Bool [G]: which of the G groups of `scores` [G, n] (one row per prompt, its n samples' rewards) are
    kept. A group of one sample is always kept (no spread to judge), as in ROLL."""
    if filter_type not in GROUP_FILTERS:
        raise ValueError(f"query filter type {filter_type!r}: expected one of {sorted(GROUP_FILTERS)}")
    if scores.dim() != 2:
        raise ValueError(f"keep_groups: scores must be [groups, samples], got shape {tuple(scores.shape)}")
    if scores.shape[1] == 1:
        return torch.ones(scores.shape[0], dtype=torch.bool)
    return GROUP_FILTERS[filter_type](scores.double(), filter_args)
