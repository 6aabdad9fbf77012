"""SFT layout helpers and the global-token-mean CE (docs/algorithms.md §13.2), by hand."""

import math

import pytest
import torch
import torch.nn.functional as F

from roll.algorithms import (
    IGNORE_INDEX,
    count_loss_tokens,
    global_counts,
    language_loss,
    mask_prompt_labels,
    sft_collate,
    sft_loss,
)
from roll.utils.errors import InputError

IGN = IGNORE_INDEX


def test_prompt_labels():
    assert mask_prompt_labels([11, 12, 13, 14, 15], 2) == [IGN, IGN, 13, 14, 15]
    assert mask_prompt_labels([11, 12], 2) == [IGN, IGN]
    with pytest.raises(InputError, match="prompt_length=3"):
        mask_prompt_labels([11, 12], 3)


def test_collate_pads_right_shifts_labels_and_counts_positions():
    out = sft_collate([[1, 2, 3], [4, 5]], [[IGN, 2, 3], [IGN, 5]], sequence_length=5, pad_token_id=0)
    assert out["input_ids"].tolist() == [[1, 2, 3, 0, 0], [4, 5, 0, 0, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]
    # labels padded with IGN, then shifted left by one: labels[:, t] is the target of logits[:, t]
    assert out["labels"].tolist() == [[2, 3, IGN, IGN, IGN], [5, IGN, IGN, IGN, IGN]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 2, 2], [0, 1, 1, 1, 1]]
    assert all(t.dtype == torch.long for t in out.values())


def test_collate_refuses_an_overlong_row():
    with pytest.raises(InputError, match=r"SFT row 1 has 6 tokens.*sequence_length=5"):
        sft_collate([[1], [1, 2, 3, 4, 5, 6]], [[IGN], [IGN] * 6], sequence_length=5, pad_token_id=0)
    with pytest.raises(ValueError, match="row 0 has 2 input_ids but 1 labels"):
        sft_collate([[1, 2]], [[IGN]], sequence_length=5, pad_token_id=0)


def test_loss_is_the_ce_sum_over_the_global_count():
    # V = 2. Position 0: logits (0, 0), target 0 → ln 2. Position 1: logits (ln 3, 0), target 0 → ln(4/3).
    # Position 2 ignored. N = 4 (another micro-batch holds 2 more label tokens).
    logits = torch.tensor([[[0.0, 0.0], [math.log(3), 0.0], [5.0, -5.0]]], requires_grad=True)
    labels = torch.tensor([[0, 0, IGN]])
    loss, metrics = sft_loss(logits, labels, 4)
    expected = (math.log(2) + math.log(4 / 3)) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert metrics == {"sft_train/loss@sum": pytest.approx(expected, rel=1e-6)}
    (grad,) = torch.autograd.grad(loss, logits)
    # d CE / d logits = softmax − onehot, divided by N; ignored positions get nothing
    expected_grad = torch.tensor([[[-0.5, 0.5], [-0.25, 0.25], [0.0, 0.0]]]) / 4
    torch.testing.assert_close(grad, expected_grad)


def test_language_loss_from_per_token_losses_ignores_masked_entries():
    losses = torch.tensor([[1.0, 2.0, float("nan")], [4.0, float("inf"), 8.0]])
    labels = torch.tensor([[3, 3, IGN], [3, IGN, 3]])
    assert language_loss(losses, labels, 5).item() == pytest.approx((1 + 2 + 4 + 8) / 5)


def test_micro_batch_sums_equal_the_global_token_mean():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 5, 7, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 7, (4, 5), generator=gen)
    labels[torch.rand(4, 5, generator=gen) < 0.4] = IGN
    labels[:, -1] = IGN
    whole = F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1), ignore_index=IGN)
    # two ranks of two micro-batches of one row each
    shards = [slice(0, 2), slice(2, 4)]
    local = [count_loss_tokens({"labels": labels[s]}, ["labels"])["labels"] for s in shards]
    n = global_counts({"labels": local[0]}, lambda t: t + float(local[1]))["labels"]
    total = sum(sft_loss(logits[r : r + 1], labels[r : r + 1], n)[0] for r in range(4))
    torch.testing.assert_close(total, whole)


def test_gradcheck():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([[1, IGN, 3], [0, 2, IGN]])
    assert torch.autograd.gradcheck(lambda x: sft_loss(x, labels, 4)[0], (logits,))
