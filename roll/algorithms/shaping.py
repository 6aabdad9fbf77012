"""ROLL's RLVR reward/advantage shaping keys as pure tensor maths (docs/algorithms.md §11).

Scores are one value per sample (B,); groups are the rows sharing an `index` value (the prompt uid), so the
maths does not depend on the rows being consecutive blocks (ROLL's assumption).
"""

import torch

from roll.algorithms.reductions import masked_whiten

__all__ = [
    "group_ids",
    "sample_level_mask",
    "reward_norm",
    "sample_loss_weights",
    "shape_advantages",
    "whiten_token_rewards",
]

NORM_TYPES = ("batch", "group", None)


def group_ids(index) -> torch.Tensor:
    """Integer group id per row from any hashable per-row key (first-occurrence order)."""
    ids: dict = {}
    return torch.tensor([ids.setdefault(key, len(ids)) for key in index], dtype=torch.long)


def _group_mean(scores, gid):
    count = torch.zeros(int(gid.max()) + 1, dtype=scores.dtype).index_add_(0, gid, torch.ones_like(scores))
    total = torch.zeros_like(count).index_add_(0, gid, scores)
    return (total / count)[gid], count[gid]


def sample_level_mask(
    scores,
    response_lengths,
    max_response_length: int,
    index,
    *,
    max_len_mask=False,
    difficulty_mask=False,
    difficulty_low_threshold=0.0,
    difficulty_high_threshold=1.0,
    error_max_len_clip=False,
    error_max_len_threshold=None,
) -> torch.Tensor:
    """1.0 per sample kept for the loss, 0.0 per sample dropped (ROLL's `get_sample_level_mask`).

    max_len_mask drops truncated samples (length == max_response_length); difficulty_mask keeps a prompt's
    samples iff low < group-mean score < high (strict); error_max_len_clip keeps score-1 samples and score-0
    samples shorter than error_max_len_threshold. A prompt with a single sample has no difficulty estimate and
    is kept (ROLL's `difficulty_mask` returns ones when num_return_sequences ≤ 1). Intent fix: error_max_len_clip
    only judges samples with score ≤ 0 (ROLL also drops every score that is not exactly 0 or 1)."""
    keep = torch.ones_like(scores, dtype=torch.float32)
    lengths = response_lengths.to(torch.long)
    if max_len_mask:
        keep = keep * (lengths < max_response_length).float()
    if difficulty_mask:
        mean, count = _group_mean(scores.float(), group_ids(index))
        inside = (mean > difficulty_low_threshold) & (mean < difficulty_high_threshold)
        keep = keep * (inside | (count < 2)).float()
    if error_max_len_clip:
        if error_max_len_threshold is None:
            raise ValueError("error_max_len_clip needs error_max_len_threshold (a token count)")
        keep = keep * ((scores > 0) | (lengths < error_max_len_threshold)).float()
    return keep


def reward_norm(scores, index, norm_mean_type=None, norm_std_type=None, eps=1e-6) -> torch.Tensor:
    """(r − mean)/(std + eps) with mean and std each over the batch, the prompt group or none.

    Unbiased std, as ROLL. A row whose std is taken over a single row, or is ≤ eps (a constant group), gets 0:
    ROLL's rule for degenerate groups (`agentic_reward_norm` in roll/pipeline/agentic/utils.py); ROLL's RLVR
    `reward_norm` gives NaN for a group of one and broadcasts group std with a non-group mean to [G, B]. Group
    std with a batch or no mean is the row's own group std."""
    for key, value in (("norm_mean_type", norm_mean_type), ("norm_std_type", norm_std_type)):
        if value not in NORM_TYPES:
            raise ValueError(f"{key}={value!r}; valid: batch, group, null")
    r = scores.float()
    if norm_mean_type is None and norm_std_type is None:
        return r
    gid = group_ids(index) if "group" in (norm_mean_type, norm_std_type) else None
    if norm_mean_type == "batch":
        mean = r.mean()
    elif norm_mean_type == "group":
        mean, _ = _group_mean(r, gid)
    else:
        mean = torch.zeros_like(r)
    if norm_std_type is None:
        return r - mean
    if norm_std_type == "batch":
        count = torch.full_like(r, r.numel())
        std = torch.full_like(r, float(r.std()) if r.numel() > 1 else 0.0)
    else:
        group_mean, count = _group_mean(r, gid)
        sq = torch.zeros(int(gid.max()) + 1).index_add_(0, gid, (r - group_mean) ** 2)[gid]
        std = (sq / (count - 1).clamp(min=1)).sqrt()
    degenerate = (count < 2) | (std <= eps)  # nothing to compare: 0, never (r − mean)/eps
    return torch.where(degenerate, torch.zeros_like(r), (r - mean) / (std + eps))


def sample_loss_weights(
    response_lengths, difficulty=None, *, difficulty_loss_weight=False, length_loss_weight=False
) -> torch.Tensor:
    """Per-sample loss weights (ROLL's `compute_sample_weights`), renormalised to mean 1.

    difficulty d ∈ [0, 1] → 0.5 + 1.5·d; length ℓ → 1.5 − (ℓ − min ℓ)/(max ℓ − min ℓ + 1e-8)."""
    w = torch.ones(len(response_lengths), dtype=torch.float32)
    if difficulty_loss_weight:
        if difficulty is None:
            raise ValueError("difficulty_loss_weight needs a 'difficulty' column in the dataset (values in [0, 1])")
        w = w * (0.5 + 1.5 * torch.as_tensor(list(difficulty), dtype=torch.float32).clamp(0, 1))
    if length_loss_weight:
        ell = response_lengths.float()
        w = w * (1.5 - (ell - ell.min()) / (ell.max() - ell.min() + 1e-8))
    if w.sum() > 0:
        w = w * (len(w) / (w.sum() + 1e-8))
    return w


def whiten_token_rewards(token_rewards, mask) -> torch.Tensor:
    """whiten_rewards: token rewards whitened over the batch's valid tokens (skipped with ≤ 1 token)."""
    if mask.sum() <= 1:
        return token_rewards * mask
    return masked_whiten(token_rewards, mask) * mask


def shape_advantages(advantages, mask, *, whiten_advantages=False, advantage_clip=None):
    """whiten_advantages (global masked whitening, unbiased var) then clamp to ±advantage_clip; masked."""
    if whiten_advantages and mask.sum() > 1:
        advantages = masked_whiten(advantages, mask)
    advantages = advantages * mask
    if advantage_clip is not None:
        advantages = advantages.clamp(-advantage_clip, advantage_clip)
    return advantages
