"""Offline distillation: the teacher's top-k, the divergence op and the student loss (docs/algorithms.md §13.4).

Labels: `labels_for_loss` are unshifted (token t or IGNORE_INDEX). The CE compares logits[:, t] with token
t + 1; so does the divergence here, which is masked with the shifted labels (ROLL masks it with the unshifted
ones, one position off). N is the global count of labels_for_loss[:, 1:] ≠ IGNORE_INDEX
(`count_loss_tokens(batch, ["labels_for_loss"])` summed by `global_counts`).
"""

from typing import NamedTuple

import torch

from roll.algorithms.divergences import get_kd_objective
from roll.algorithms.loss_tokens import IGNORE_INDEX, shift_labels_left
from roll.algorithms.reductions import float32_or_wider
from roll.algorithms.sft import token_ce_sum

__all__ = [
    "TeacherTopK",
    "DIVERGENCE_REDUCTIONS",
    "teacher_topk",
    "gather_student_logits",
    "compute_various_divergence",
    "distill_loss",
    "distill_val_loss",
]

DIVERGENCE_REDUCTIONS = ("none", "sum", "mean")


class TeacherTopK(NamedTuple):
    """What the teacher sends per position: probs (float32) and log-probs (the logits' dtype) renormalised over
    the kept entries, their vocabulary ids (None in full-vocabulary mode, logits_topk = 0) and isinf of the
    kept (temperature-scaled) logits."""

    probs: torch.Tensor
    log_probs: torch.Tensor
    indices: torch.Tensor | None
    inf_mask: torch.Tensor


def teacher_topk(logits, topk: int, target_vocab_size=None, kd_temperature=1.0, teacher_temperature=1.0):
    """Teacher logits (…, V) → TeacherTopK. The logits are cut to `target_vocab_size` columns (when narrower
    than V), divided by kd_temperature then by teacher_temperature; topk > 0 keeps the k largest (sorted
    descending), topk = 0 keeps all."""
    if not isinstance(topk, int) or topk < 0:
        raise ValueError(f"logits_topk must be an int ≥ 0 (0 = full vocabulary), got {topk!r}")
    if target_vocab_size is not None and logits.shape[-1] != target_vocab_size:
        logits = logits[..., : min(logits.shape[-1], target_vocab_size)]
    logits = logits / kd_temperature / teacher_temperature
    if topk > logits.shape[-1]:
        raise ValueError(f"logits_topk={topk} is larger than the teacher's vocabulary width {logits.shape[-1]}")
    indices = None
    if topk:
        logits, indices = torch.topk(logits, k=topk, dim=-1)
    probs = torch.softmax(float32_or_wider(logits), dim=-1)
    return TeacherTopK(probs, torch.log_softmax(logits, dim=-1), indices, logits.isinf())


def gather_student_logits(logits: torch.Tensor, indices: torch.Tensor | None) -> torch.Tensor:
    """Student logits at the teacher's kept ids (…, K); all of them when `indices` is None (full vocabulary)."""
    if indices is None:
        return logits
    indices = indices.long()
    if indices.dim() == logits.dim() - 1:  # top-1 sent as (B, S)
        indices = indices.unsqueeze(-1)
    return torch.gather(logits, -1, indices)


def compute_various_divergence(
    logits,
    teacher: TeacherTopK,
    labels,
    kd_objective="forward_kl",
    reduction="mean",
    *,
    kd_temperature=1.0,
    adaptive_kl_alpha=0.5,
    skew_lambda=0.1,
):
    """Per-position divergence (the `kd_objective`) between the student logits (B, S, V) and the teacher →
    (loss, token_count). Positions are masked position for position with `labels` (IGNORE_INDEX = not counted;
    the op never shifts: pass the labels aligned with the logits). token_count = #(labels ≠ IGNORE_INDEX).
    reduction "none": the (B, S) values, unmasked; "sum": Σ over counted positions; "mean": sum /
    max(token_count, 1). A position that does not count contributes nothing to value and gradient."""
    if reduction not in DIVERGENCE_REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; valid: {list(DIVERGENCE_REDUCTIONS)}")
    objective = get_kd_objective(kd_objective)
    if teacher.indices is None and logits.shape[-1] != teacher.probs.shape[-1]:
        raise ValueError(
            f"logits_topk=0 (full vocabulary) needs the teacher's width after the target_vocab_size cut "
            f"({teacher.probs.shape[-1]}) to equal the student's logits width ({logits.shape[-1]}): use a "
            "teacher and student with the same vocabulary, or logits_topk > 0"
        )
    kld = objective(
        gather_student_logits(logits, teacher.indices),
        teacher.probs,
        teacher.log_probs,
        teacher.inf_mask,
        kd_temperature=kd_temperature,
        adaptive_kl_alpha=adaptive_kl_alpha,
        skew_lambda=skew_lambda,
    )
    counted = labels != IGNORE_INDEX
    token_count = counted.sum().float()
    if reduction == "none":
        return kld, token_count
    total = torch.where(counted, kld, torch.zeros_like(kld)).sum()
    if reduction == "sum":
        return total, token_count
    return total / token_count.clamp(min=1.0), token_count


def distill_loss(
    logits,
    labels_for_loss,
    teacher: TeacherTopK,
    batch_num_tokens,
    kd_objective="forward_kl",
    distill_loss_weight=0.5,
    *,
    kd_temperature=1.0,
    adaptive_kl_alpha=0.5,
    skew_lambda=0.1,
):
    """Student micro-batch loss (1 − w)·CE_sum/N + w·D_sum/N → (loss, metrics).

    CE_sum: Σ_{b, t<S−1, L[b,t+1]≠IGN} −log softmax(logits[b,t])[L[b,t+1]] (raw logits, no temperature).
    D_sum: the divergence summed over the same positions (the shifted labels). Metrics (`@sum`: summed over
    micro-batches and ranks they are the step's global token means): train/loss@sum,
    train/train_distill_loss@sum = D_sum/N, train/train_student_loss@sum = CE_sum/N."""
    if not 0 <= distill_loss_weight <= 1:
        raise ValueError(f"distill_loss_weight must be in [0, 1], got {distill_loss_weight}")
    shifted = shift_labels_left(labels_for_loss)
    student = token_ce_sum(logits, shifted) / batch_num_tokens
    divergence, _ = compute_various_divergence(
        logits,
        teacher,
        shifted,
        kd_objective,
        "sum",
        kd_temperature=kd_temperature,
        adaptive_kl_alpha=adaptive_kl_alpha,
        skew_lambda=skew_lambda,
    )
    divergence = divergence / batch_num_tokens
    loss = (1 - distill_loss_weight) * student + distill_loss_weight * divergence
    return loss, {
        "train/loss@sum": loss.item(),
        "train/train_distill_loss@sum": divergence.item(),
        "train/train_student_loss@sum": student.item(),
    }


def distill_val_loss(logits, labels_for_loss, batch_num_tokens):
    """Validation: the CE part only, CE_sum/N → (loss, {"student/val_loss@sum": loss})."""
    loss = token_ce_sum(logits, shift_labels_left(labels_for_loss)) / batch_num_tokens
    return loss, {"student/val_loss@sum": loss.item()}
