"""On-policy distillation: the teachers' KL and the advantages built from it (docs/algorithms.md §13.5).

Per teacher n (coefficient c_n, optional row routing mask): KL_n = kl_penalty(s, ref_n)·m on its rows, 0 on
the others, with s the student's log-probs of its own tokens and ref_n the teacher's. Pure mode: A = −Σ c_n KL_n.
Mixed mode (`use_opd`): A = A_RL − Σ c_n KL_n, the RL estimator's advantages minus the KL (the KL is an
advantage term: not discounted, not in the returns). Then both modes: whitening, mask, advantage clip.
"""

from collections.abc import Mapping
from typing import NamedTuple

import torch

from roll.algorithms.kl import kl_penalty as _kl_penalty
from roll.algorithms.shaping import shape_advantages

__all__ = ["OPD_KL_PENALTIES", "OPDAdvantages", "opd_kl_penalty", "opd_teacher_kl", "opd_advantages"]

OPD_KL_PENALTIES = ("kl", "abs", "mse", "k3")


def opd_kl_penalty(log_probs, teacher_log_probs, kl_penalty="kl"):
    """Per-token estimate from d = s − ref: kl → d, abs → |d|, mse → ½d², k3 → clamp(e^−d + d − 1, −10, 10)."""
    if kl_penalty not in OPD_KL_PENALTIES:
        why = (
            " ('full' needs full-vocabulary log-probs; on-policy distillation has one log-prob per token)"
            if kl_penalty == "full"
            else ""
        )
        raise ValueError(
            f"kl_penalty={kl_penalty!r} is not available for on-policy distillation{why}; "
            f"valid: {list(OPD_KL_PENALTIES)}"
        )
    return _kl_penalty(log_probs, teacher_log_probs, kl_penalty)


@torch.no_grad()
def opd_teacher_kl(
    log_probs: torch.Tensor,
    teacher_log_probs: Mapping[str, torch.Tensor],
    response_mask: torch.Tensor,
    kl_penalty="kl",
    kl_coefs: Mapping[str, float | None] | None = None,
    row_masks: Mapping[str, torch.Tensor | None] | None = None,
):
    """→ (Σ_n c_n KL_n, {n: KL_n}), each (B, T) float32. `teacher_log_probs`: teacher name → its log-probs of
    the student's tokens; `kl_coefs`: name → opd_kl_coef (missing or None → 1.0); `row_masks`: name → (B,)
    bool rows routed to that teacher (missing or None → every row). Rows of no teacher get 0."""
    if not teacher_log_probs:
        raise ValueError("on-policy distillation needs the log-probs of at least one teacher")
    for label, mapping in (("kl_coefs", kl_coefs), ("row_masks", row_masks)):
        unknown = sorted(set(mapping or {}) - set(teacher_log_probs))
        if unknown:
            raise ValueError(f"{label} names {unknown}, which are not teachers; teachers: {sorted(teacher_log_probs)}")
    mask = response_mask.float()
    total = torch.zeros_like(mask)
    per_teacher = {}
    for name, reference in teacher_log_probs.items():
        kld = opd_kl_penalty(log_probs, reference, kl_penalty).float() * mask
        rows = (row_masks or {}).get(name)
        if rows is not None:
            # unrouted rows hold no teacher log-probs (0): their estimate is meaningless, never used
            kld = torch.where(rows.bool().reshape(-1, 1), kld, torch.zeros_like(kld))
        coef = (kl_coefs or {}).get(name)
        per_teacher[name] = kld
        total = total + (1.0 if coef is None else float(coef)) * kld
    return total, per_teacher


class OPDAdvantages(NamedTuple):
    advantages: torch.Tensor  # after whitening, mask and clip
    returns: torch.Tensor | None  # pure: −KL; mixed: the RL estimator's returns (as given)
    raw_advantages: torch.Tensor  # pure: −KL; mixed: the RL advantages before the KL
    metrics: dict


@torch.no_grad()
def opd_advantages(
    kl, response_mask, rl_advantages=None, rl_returns=None, *, whiten_advantages=False, advantage_clip=None
):
    """Advantages from the weighted teacher KL (`opd_teacher_kl`'s total). Pure mode: rl_advantages None,
    A = −KL, returns = A. Mixed mode: A = rl_advantages − KL, returns = rl_returns. Then whitening over the
    mask (masked mean, unbiased masked variance, rsqrt(var + 1e-8); skipped when Σm ≤ 1), A·m, and with
    advantage_clip: metric critic/advantage_clip_frac = fraction of all entries outside ±clip, then clamp."""
    raw = -kl if rl_advantages is None else rl_advantages
    advantages = raw if rl_advantages is None else rl_advantages - kl
    returns = advantages if rl_advantages is None else rl_returns
    mask = response_mask.to(advantages.dtype)
    advantages = shape_advantages(advantages, mask, whiten_advantages=whiten_advantages)
    metrics = {}
    if advantage_clip is not None:
        outside = (advantages > advantage_clip) | (advantages < -advantage_clip)
        metrics["critic/advantage_clip_frac"] = outside.float().mean().item() if outside.numel() else 0.0
        advantages = advantages.clamp(-advantage_clip, advantage_clip)
    return OPDAdvantages(advantages, returns, raw, metrics)
