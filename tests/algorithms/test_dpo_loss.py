"""DPO, cDPO and IPO with beta / label_smoothing / ipo honoured (docs/algorithms.md §13.3), by hand."""

import math

import pytest
import torch

from roll.algorithms import (
    DPO_LOSSES,
    dpo_loss,
    dpo_metrics,
    get_dpo_loss_fn,
    interleave_pairs,
    response_span_mask,
    sequence_log_probs,
    split_pairs,
    token_log_probs,
)

# one pair with h = (−1 − −3) − (−2 − −2) = 2, one pair with h = 0 and equal rewards (a tie)
PI_C, PI_R = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -2.0])
REF_C, REF_R = torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0])


def log1p_exp(x):
    return math.log(1 + math.exp(x))  # −log σ(−x)


def test_token_log_probs_mask_and_target_shift():
    # position t holds log p(input_ids[t + 1]); logits[0] = (0, ln 3) → p(1) = 3/4; mask[2] = 0 → position 1 is 0
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, 0.0], [1.0, 2.0]]])
    out = token_log_probs(logits, torch.tensor([[0, 1, 0]]), torch.tensor([[1, 1, 0]]))
    torch.testing.assert_close(out, torch.tensor([[math.log(0.75), 0.0]]))


def test_response_span_and_sequence_sums():
    attention = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    lens = torch.tensor([2, 1])
    # full-width mask with the prompt zeroed: [0 0 1 1 0], [0 1 1 0 0]; then columns 1..
    assert response_span_mask(attention, lens).tolist() == [[0, 1, 1, 0], [1, 1, 0, 0]]
    per_token = torch.tensor([[1.0, 2.0, 4.0, 8.0], [16.0, 32.0, 64.0, 128.0]])
    assert sequence_log_probs(per_token, attention, lens).tolist() == [6.0, 48.0]


def test_pairs_interleave_and_split():
    chosen, rejected = torch.tensor([[1], [3]]), torch.tensor([[2], [4]])
    rows = interleave_pairs(chosen, rejected)
    assert rows.tolist() == [[1], [2], [3], [4]]
    c, r = split_pairs(rows)
    assert torch.equal(c, chosen) and torch.equal(r, rejected)
    with pytest.raises(ValueError, match="odd number of rows"):
        split_pairs(torch.zeros(3, 2))


def test_sigmoid_dpo_with_beta_honoured():
    loss, chosen, rejected = dpo_loss(PI_C, PI_R, REF_C, REF_R, beta=0.5)
    # −log σ(β h): h = 2 → log(1 + e^−1); h = 0 → log 2
    assert loss.item() == pytest.approx((log1p_exp(-1.0) + math.log(2)) / 2, rel=1e-6)
    assert chosen.tolist() == [0.5, 0.0] and rejected.tolist() == [-0.5, 0.0]
    metrics = dpo_metrics(loss, chosen, rejected)
    assert metrics == pytest.approx(
        {
            "actor/loss": loss.item(),
            "actor/acc": 0.5,  # the tie counts as wrong
            "actor/chosen_reward": 0.25,
            "actor/reject_reward": -0.25,
            "actor/margins": 0.5,
        }
    )
    # ROLL's fixed setting (β = 0.1) is the default
    default, _, _ = dpo_loss(PI_C[:1], PI_R[:1], REF_C[:1], REF_R[:1])
    assert default.item() == pytest.approx(log1p_exp(-0.2), rel=1e-6)


def test_cdpo_label_smoothing_honoured():
    loss, _, _ = dpo_loss(PI_C[:1], PI_R[:1], REF_C[:1], REF_R[:1], beta=0.5, label_smoothing=0.2)
    # −0.8 log σ(1) − 0.2 log σ(−1)
    assert loss.item() == pytest.approx(0.8 * log1p_exp(-1.0) + 0.2 * log1p_exp(1.0), rel=1e-6)


def test_ipo_honoured():
    for beta, expected in ((0.5, 1.0), (0.25, 0.0), (1.0, 2.25)):  # (h − 1/(2β))² at h = 2
        loss, chosen, _ = dpo_loss(PI_C[:1], PI_R[:1], REF_C[:1], REF_R[:1], beta=beta, ipo=True)
        assert loss.item() == pytest.approx(expected)
        assert chosen.item() == pytest.approx(beta * 1.0)
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(PI_C, PI_R, REF_C, REF_R, ipo=True, label_smoothing=0.1)


def test_bad_settings():
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(PI_C, PI_R, REF_C, REF_R, beta=0.0)
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(PI_C, PI_R, REF_C, REF_R, label_smoothing=1.5)
    assert sorted(DPO_LOSSES) == ["ipo", "sigmoid"]
    with pytest.raises(ValueError, match="valid"):
        get_dpo_loss_fn("hinge")


def test_gradient_by_hand():
    pi_c = torch.tensor([-1.0], requires_grad=True)
    loss, _, _ = dpo_loss(pi_c, PI_R[:1], REF_C[:1], REF_R[:1], beta=0.5, label_smoothing=0.2)
    (grad,) = torch.autograd.grad(loss, pi_c)
    # d/dh [−(1−ε) log σ(βh) − ε log σ(−βh)] = −(1−ε) β σ(−βh) + ε β σ(βh), at βh = 1
    sig = 1 / (1 + math.exp(-1.0))
    assert grad.item() == pytest.approx(-0.8 * 0.5 * (1 - sig) + 0.2 * 0.5 * sig, rel=1e-6)


def pair_batch(seed, pairs, width=6, vocab=5):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(2 * pairs, width, vocab, generator=gen, dtype=torch.float64)
    ref = torch.randn(2 * pairs, width - 1, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, vocab, (2 * pairs, width), generator=gen)
    attention = torch.ones(2 * pairs, width, dtype=torch.long)
    attention[1::2, -2:] = 0  # the rejected answers are shorter
    lens = torch.tensor([2, 2] * pairs)
    return logits, ref, ids, attention, lens


def rows_loss(logits, ref, ids, attention, lens, **settings):
    policy = sequence_log_probs(token_log_probs(logits, ids, attention), attention, lens)
    reference = sequence_log_probs(ref, attention, lens)
    return dpo_loss(*split_pairs(policy), *split_pairs(reference), **settings)[0]


def test_gradcheck_from_logits():
    logits, ref, ids, attention, lens = pair_batch(0, pairs=2)
    logits.requires_grad_(True)
    for settings in ({"beta": 0.3, "label_smoothing": 0.1}, {"beta": 0.3, "ipo": True}):
        assert torch.autograd.gradcheck(lambda x, s=settings: rows_loss(x, ref, ids, attention, lens, **s), (logits,))


def test_mean_of_equal_micro_batch_means_is_the_global_mean():
    # DPO trains with apply_loss_scale off: the step's objective is the mean of the micro-batch means
    logits, ref, ids, attention, lens = pair_batch(1, pairs=4)
    whole = rows_loss(logits, ref, ids, attention, lens, beta=0.2)
    parts = [rows_loss(logits[s], ref[s], ids[s], attention[s], lens[s], beta=0.2) for s in (slice(0, 4), slice(4, 8))]
    torch.testing.assert_close((parts[0] + parts[1]) / 2, whole)
