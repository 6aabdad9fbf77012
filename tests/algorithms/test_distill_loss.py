"""Teacher top-k, the divergence op's reductions and the student loss on the CE's positions
(docs/algorithms.md §13.4), by hand."""

import math

import pytest
import torch
import torch.nn.functional as F

from roll.algorithms import (
    IGNORE_INDEX,
    TeacherTopK,
    compute_various_divergence,
    count_loss_tokens,
    distill_loss,
    distill_val_loss,
    global_counts,
    shift_labels_left,
    teacher_topk,
)

IGN = IGNORE_INDEX
ln = math.log
NEG = float("-inf")


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_topk_values_indices_and_temperatures():
    logits = torch.tensor([[[1.0, 3.0, 2.0, 0.0]]])
    out = teacher_topk(logits, topk=2, kd_temperature=2.0)
    assert out.indices.tolist() == [[[1, 2]]]
    # kept logits (3, 2)/2 = (1.5, 1.0), renormalised over the two
    torch.testing.assert_close(out.probs, torch.tensor([[[sigmoid(0.5), sigmoid(-0.5)]]]))
    torch.testing.assert_close(out.log_probs, torch.tensor([[[-ln(1 + math.exp(-0.5)), -ln(1 + math.exp(0.5))]]]))
    assert not out.inf_mask.any()
    # teacher_temperature divides again: (3, 2)/2/0.5 = (3, 2)
    both = teacher_topk(logits, topk=2, kd_temperature=2.0, teacher_temperature=0.5)
    torch.testing.assert_close(both.probs, torch.tensor([[[sigmoid(1.0), sigmoid(-1.0)]]]))


def test_target_vocab_cut_and_full_vocabulary():
    logits = torch.tensor([[[1.0, 3.0, 2.0, 9.0]]])  # id 3 (an added token) is cut away
    out = teacher_topk(logits, topk=2, target_vocab_size=3)
    assert out.indices.tolist() == [[[1, 2]]]
    full = teacher_topk(logits, topk=0, target_vocab_size=3)
    assert full.indices is None
    torch.testing.assert_close(full.probs, torch.softmax(torch.tensor([[[1.0, 3.0, 2.0]]]), -1))
    with pytest.raises(ValueError, match="logits_topk=4"):
        teacher_topk(logits, topk=4, target_vocab_size=3)
    with pytest.raises(ValueError, match="int ≥ 0"):
        teacher_topk(logits, topk=-1)


def test_inf_entries_and_dtypes():
    out = teacher_topk(torch.tensor([[[0.0, NEG, NEG]]], dtype=torch.bfloat16), topk=2)
    assert out.inf_mask.tolist() == [[[False, True]]]
    assert out.probs.tolist() == [[[1.0, 0.0]]] and out.log_probs.tolist() == [[[0.0, NEG]]]
    assert out.probs.dtype == torch.float32 and out.log_probs.dtype == torch.bfloat16


def fkl_half(p):  # forward KL of p against q = (½, ½)
    return sum(x * ln(2 * x) for x in p)


def case():
    """B = 1, S = 4, V = 3, top-2. Student logits 0 everywhere (q = ½ on any two ids, CE = ln 3).
    Teacher at t1 keeps ids (0, 1) with p = (¾, ¼); at t2 ids (2, 1) with p = (⅘, ⅕); t0 and t3 other values."""
    teacher_logits = torch.tensor([[[0.0, 0.0, -5.0], [ln(3), 0.0, -5.0], [-5.0, 0.0, ln(4)], [0.0, 1.0, 2.0]]])
    teacher = teacher_topk(teacher_logits, topk=2)
    student = torch.zeros(1, 4, 3, dtype=torch.float64, requires_grad=True)
    kld = [0.0, fkl_half([0.75, 0.25]), fkl_half([0.8, 0.2]), fkl_half([sigmoid(1.0), sigmoid(-1.0)])]
    return teacher, student, kld


def test_divergence_reductions():
    teacher, student, kld = case()
    labels = torch.tensor([[IGN, 7, 7, IGN]])
    none, count = compute_various_divergence(student, teacher, labels, "forward_kl", "none")
    torch.testing.assert_close(none, torch.tensor([kld], dtype=torch.float64))  # unmasked
    assert count.item() == 2
    total, _ = compute_various_divergence(student, teacher, labels, "forward_kl", "sum")
    assert total.item() == pytest.approx(kld[1] + kld[2], rel=1e-6)
    mean, _ = compute_various_divergence(student, teacher, labels, "forward_kl", "mean")
    assert mean.item() == pytest.approx((kld[1] + kld[2]) / 2, rel=1e-6)
    empty, count = compute_various_divergence(student, teacher, torch.full((1, 4), IGN), "forward_kl", "mean")
    assert empty.item() == 0.0 and count.item() == 0  # sum / max(count, 1)
    with pytest.raises(ValueError, match="reduction"):
        compute_various_divergence(student, teacher, labels, "forward_kl", "max")


def test_student_loss_uses_the_ce_positions():
    # answer tokens at columns 2, 3: predicted by positions 1 and 2 — the CE's and, here, the divergence's.
    # ROLL masks the divergence with the unshifted labels: positions 2 and 3 (kld[2] + kld[3]).
    teacher, student, kld = case()
    labels = torch.tensor([[IGN, IGN, 2, 0]])
    n = global_counts(count_loss_tokens({"labels_for_loss": labels}, ["labels_for_loss"]))["labels_for_loss"]
    assert n == 2
    loss, metrics = distill_loss(student, labels, teacher, n, distill_loss_weight=0.25)
    ce, d = 2 * ln(3) / 2, (kld[1] + kld[2]) / 2
    assert loss.item() == pytest.approx(0.75 * ce + 0.25 * d, rel=1e-6)
    assert metrics == pytest.approx(
        {
            "train/loss@sum": 0.75 * ce + 0.25 * d,
            "train/train_distill_loss@sum": d,
            "train/train_student_loss@sum": ce,
        },
        rel=1e-6,
    )
    val, val_metrics = distill_val_loss(student, labels, n)
    assert val.item() == pytest.approx(ce) and val_metrics == {"student/val_loss@sum": pytest.approx(ce)}


def test_distill_on_prompt_counts_only_predicted_tokens():
    # every token a label: column 0 is predicted by nothing, so N = 3 (ROLL counts 4) and both terms run
    # over positions 0, 1, 2
    teacher, student, kld = case()
    labels = torch.tensor([[1, 1, 2, 0]])
    n = global_counts(count_loss_tokens({"labels_for_loss": labels}, ["labels_for_loss"]))["labels_for_loss"]
    assert n == 3
    loss, metrics = distill_loss(student, labels, teacher, n, distill_loss_weight=1.0)
    assert loss.item() == pytest.approx(sum(kld[:3]) / 3, rel=1e-6)
    assert metrics["train/train_student_loss@sum"] == pytest.approx(ln(3))


def test_full_vocabulary_needs_equal_widths():
    teacher = teacher_topk(torch.zeros(1, 2, 4), topk=0)
    with pytest.raises(ValueError, match=r"logits_topk=0.*\(4\).*\(5\)"):
        compute_various_divergence(torch.zeros(1, 2, 5), teacher, torch.zeros(1, 2, dtype=torch.long))


def test_top1_indices_sent_as_two_dims():
    teacher = teacher_topk(torch.tensor([[[0.0, 2.0, 1.0]]]), topk=1)
    squeezed = TeacherTopK(teacher.probs, teacher.log_probs, teacher.indices[..., 0], teacher.inf_mask)
    a, _ = compute_various_divergence(torch.tensor([[[1.0, 0.0, 3.0]]]), squeezed, torch.tensor([[1]]), "reverse_kl")
    assert a.item() == pytest.approx(0.0)  # one kept entry: p = q = 1


def random_batch(seed, rows=4, width=6, vocab=7, topk=3):
    gen = torch.Generator().manual_seed(seed)
    student = torch.randn(rows, width, vocab, generator=gen, dtype=torch.float64)
    teacher_logits = torch.randn(rows, width, vocab, generator=gen, dtype=torch.float64)
    teacher_logits[0, 1, :] = NEG  # a row of the top-k with −inf entries
    teacher_logits[0, 1, 2] = 0.0
    labels = torch.randint(0, vocab, (rows, width), generator=gen)
    labels[:, :2] = IGN  # prompt
    labels[1, -2:] = IGN  # padding
    return student, teacher_topk(teacher_logits, topk=topk), labels


@pytest.mark.parametrize("objective", ["forward_kl", "reverse_kl", "adaptive_kl", "js_divergence"])
def test_micro_batch_sums_equal_the_global_token_means(objective):
    student, teacher, labels = random_batch(0)
    w = 0.3
    # whole batch: the token means over the CE's positions
    shifted = shift_labels_left(labels)
    ce_mean = F.cross_entropy(student.reshape(-1, 7), shifted.reshape(-1), ignore_index=IGN)
    d_mean, _ = compute_various_divergence(student, teacher, shifted, objective, "mean")
    # two ranks, each two micro-batches of one row; N from the counts of each rank's shard
    local = [count_loss_tokens({"labels_for_loss": labels[s]}, ["labels_for_loss"]) for s in (slice(0, 2), slice(2, 4))]
    n = global_counts(local[0], lambda t: t + float(local[1]["labels_for_loss"]))["labels_for_loss"]
    total = 0.0
    for r in range(4):
        part = TeacherTopK(*(None if x is None else x[r : r + 1] for x in teacher))
        loss, _ = distill_loss(student[r : r + 1], labels[r : r + 1], part, n, objective, w)
        total = total + loss
    torch.testing.assert_close(total, (1 - w) * ce_mean + w * d_mean)


@pytest.mark.parametrize(
    "objective", ["forward_kl", "reverse_kl", "skewed_forward_kl", "skewed_reverse_kl", "js_divergence"]
)
def test_gradcheck_with_inf_teacher_entries(objective):
    student, teacher, labels = random_batch(1, rows=2, width=3, vocab=5, topk=3)
    assert teacher.inf_mask.any()
    student.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: distill_loss(x, labels, teacher, 3, objective, 0.5)[0], (student,))
