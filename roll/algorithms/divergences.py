"""Distillation divergences per position, by `kd_objective` name (docs/algorithms.md §13.4).

Every objective takes the student logits at the teacher's kept entries `z` (width K; the full vocabulary when
logits_topk = 0), the teacher's renormalised probs `p` and log-probs `ℓ`, and the teacher's inf mask `I`, and
returns one value per position (the last axis summed). q = softmax(z/τ), ℓ_q = log_softmax(z/τ) in float32.
An entry under M = isinf(z/τ) ∨ I contributes 0 to the value and nothing to the gradient: every quantity that
could be infinite there is replaced by a finite stand-in before it is multiplied (ROLL masks the value only, so
its backward pass computes 0·∞ = NaN for reverse_kl, adaptive_kl and the skewed KLs). No τ² factor.
"""

import torch

from roll.algorithms.reductions import float32_or_wider as _float

__all__ = ["KD_OBJECTIVES", "register_kd_objective", "get_kd_objective"]

KD_OBJECTIVES: dict = {}  # kd_objective name → fn(logits, teacher_probs, teacher_log_probs, teacher_inf_mask, …)


def register_kd_objective(name: str):
    def add(fn):
        if name in KD_OBJECTIVES and KD_OBJECTIVES[name] is not fn:
            raise ValueError(f"kd_objective {name!r} is already registered")
        KD_OBJECTIVES[name] = fn
        return fn

    return add


def get_kd_objective(name: str):
    if name not in KD_OBJECTIVES:
        raise ValueError(f"unknown kd_objective {name!r}; valid: {sorted(KD_OBJECTIVES)}")
    return KD_OBJECTIVES[name]


def _student(logits, teacher_inf_mask, kd_temperature):
    """(q, ℓ_q, M): the student's distribution over the K entries and the mask of entries that do not count."""
    z = logits / kd_temperature
    masked = z.isinf() | teacher_inf_mask.bool()
    z = _float(z)
    return torch.softmax(z, dim=-1), torch.log_softmax(z, dim=-1), masked


def _safe(x, masked, fill=0.0):
    """x with `fill` under the mask: no ±inf enters a product there, so the gradient stays finite."""
    return torch.where(masked, torch.full_like(x, fill), x)


def _safe_log(x, masked):
    # log of a mixture that may be exactly 0 on a masked entry; 1 → log 1 = 0 there
    return torch.log(_safe(x, masked, 1.0))


def _sum_unmasked(term, masked):
    return _safe(term, masked).sum(dim=-1)


@register_kd_objective("forward_kl")
def forward_kl(logits, teacher_probs, teacher_log_probs, teacher_inf_mask, kd_temperature=1.0, **options):
    """Σ p (ℓ − ℓ_q)."""
    _, lq, masked = _student(logits, teacher_inf_mask, kd_temperature)
    p, lt = _safe(_float(teacher_probs), masked), _safe(_float(teacher_log_probs), masked)
    return _sum_unmasked(p * (lt - _safe(lq, masked)), masked)


@register_kd_objective("reverse_kl")
def reverse_kl(logits, teacher_probs, teacher_log_probs, teacher_inf_mask, kd_temperature=1.0, **options):
    """Σ q (ℓ_q − ℓ)."""
    q, lq, masked = _student(logits, teacher_inf_mask, kd_temperature)
    lt = _safe(_float(teacher_log_probs), masked)
    return _sum_unmasked(q * (_safe(lq, masked) - lt), masked)


@register_kd_objective("skewed_forward_kl")
def skewed_forward_kl(
    logits, teacher_probs, teacher_log_probs, teacher_inf_mask, kd_temperature=1.0, skew_lambda=0.1, **options
):
    """Σ p (ℓ − log m), m = λ p + (1 − λ) q (no epsilon)."""
    q, _, masked = _student(logits, teacher_inf_mask, kd_temperature)
    p, lt = _safe(_float(teacher_probs), masked), _safe(_float(teacher_log_probs), masked)
    mix = skew_lambda * p + (1 - skew_lambda) * q
    return _sum_unmasked(p * (lt - _safe_log(mix, masked)), masked)


@register_kd_objective("skewed_reverse_kl")
def skewed_reverse_kl(
    logits, teacher_probs, teacher_log_probs, teacher_inf_mask, kd_temperature=1.0, skew_lambda=0.1, **options
):
    """Σ q (ℓ_q − log m), m = (1 − λ) p + λ q (no epsilon)."""
    q, lq, masked = _student(logits, teacher_inf_mask, kd_temperature)
    p = _safe(_float(teacher_probs), masked)
    mix = (1 - skew_lambda) * p + skew_lambda * q
    return _sum_unmasked(q * (_safe(lq, masked) - _safe_log(mix, masked)), masked)


@register_kd_objective("js_divergence")
def js_divergence(logits, teacher_probs, teacher_log_probs, teacher_inf_mask, kd_temperature=1.0, **options):
    """½ Σ [p (log(p + 1e-9) − log(m + 1e-9)) + q (log(q + 1e-9) − log(m + 1e-9))], m = (p + q)/2; the teacher's
    log-probs are not used (recomputed from p)."""
    q, _, masked = _student(logits, teacher_inf_mask, kd_temperature)
    p = _safe(_float(teacher_probs), masked)
    log_m = torch.log((p + q) / 2 + 1e-9)
    term = p * (torch.log(p + 1e-9) - log_m) + q * (torch.log(q + 1e-9) - log_m)
    return _sum_unmasked(term / 2, masked)


@register_kd_objective("adaptive_kl")
def adaptive_kl(
    logits, teacher_probs, teacher_log_probs, teacher_inf_mask, kd_temperature=1.0, adaptive_kl_alpha=0.5, **options
):
    """w_head·FKL + w_tail·RKL. Sort p ascending (q follows), gap = |p_s − q_s|, tail = [cumsum(p_s) ≤ α];
    g_head = Σ gap·(1 − tail), g_tail = Σ gap·tail (detached), w = g / (g_head + g_tail); both weights are ½
    when g_head + g_tail = 0 (q = p on every kept entry: FKL = RKL = 0; ROLL gives NaN)."""
    with torch.no_grad():
        q, _, _ = _student(logits, teacher_inf_mask, kd_temperature)
        sorted_p, order = _float(teacher_probs).sort(dim=-1)
        gap = (sorted_p - q.gather(-1, order)).abs()
        tail = (sorted_p.cumsum(dim=-1) <= adaptive_kl_alpha).to(gap.dtype)
        g_head, g_tail = (gap * (1 - tail)).sum(dim=-1), (gap * tail).sum(dim=-1)
        total = g_head + g_tail
        zero = total == 0
        w_head = torch.where(zero, torch.full_like(total, 0.5), g_head / torch.where(zero, 1.0, total))
        w_tail = torch.where(zero, torch.full_like(total, 0.5), g_tail / torch.where(zero, 1.0, total))
    args = (logits, teacher_probs, teacher_log_probs, teacher_inf_mask, kd_temperature)
    return w_head * forward_kl(*args) + w_tail * reverse_kl(*args)
