"""Loss-token and sample counts of a training step (docs/algorithms.md §13.1), by hand."""

import pytest
import torch

from roll.algorithms import IGNORE_INDEX, count_loss_tokens, count_valid_samples, global_counts, shift_labels_left

IGN = IGNORE_INDEX


def batch():
    return {
        "labels": torch.tensor([[IGN, 5, 6, IGN], [7, IGN, IGN, IGN]]),
        "labels_for_loss": torch.tensor([[IGN, 5, 6, IGN], [7, IGN, IGN, IGN]]),
        "response_mask": torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]]),
        "final_response_mask": torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
    }


def test_counts_per_key():
    keys = ["labels", "labels_for_loss", "response_mask", "final_response_mask", "absent"]
    counts = {k: int(v) for k, v in count_loss_tokens(batch(), keys).items()}
    # labels: 3 entries ≠ IGN. labels_for_loss: columns 1.. only (the 7 at column 0 is predicted by nothing;
    # ROLL would count 3). response_mask: columns 1.. → 2 + 1. Other masks: their sum. Absent keys: skipped.
    assert counts == {"labels": 3, "labels_for_loss": 2, "response_mask": 3, "final_response_mask": 2}
    assert count_loss_tokens(batch(), []) == {}


def test_valid_samples_per_key():
    keys = ["labels", "labels_for_loss", "response_mask", "final_response_mask"]
    counts = {k: int(v) for k, v in count_valid_samples(batch(), keys, rows=2).items()}
    assert counts == {"default": 2, "labels": 2, "labels_for_loss": 1, "response_mask": 2, "final_response_mask": 1}


def test_keys_must_be_a_list_of_names():
    with pytest.raises(TypeError, match="loss_mask_keys"):
        count_loss_tokens(batch(), "labels")


def test_global_counts_sum_over_ranks_and_floor_at_one():
    rank0 = {"labels": torch.tensor(3), "response_mask": torch.tensor(0)}
    rank1 = {"labels": torch.tensor(4), "response_mask": torch.tensor(0)}
    other = torch.tensor([4.0, 0.0], dtype=torch.float64)

    def all_reduce(t):  # this rank's vector plus the other rank's: what a SUM all-reduce returns
        assert t.dtype == torch.float64 and t.dim() == 1
        return t + other

    assert global_counts(rank0, all_reduce) == {"labels": 7, "response_mask": 1}
    assert global_counts(rank1) == {"labels": 4, "response_mask": 1}
    # two ranks holding the same rows (context parallelism): the sum counts each row twice
    assert global_counts({"labels": torch.tensor(3)}, lambda t: t * 2, replicas=2) == {"labels": 3}
    with pytest.raises(ValueError, match="replicas"):
        global_counts({"labels": torch.tensor(3)}, replicas=2)
    assert global_counts({}) == {}


def test_shift_labels_left():
    shifted = shift_labels_left(torch.tensor([[IGN, IGN, 3, 4], [1, 2, 3, 4]]))
    assert shifted.tolist() == [[IGN, 3, 4, IGN], [2, 3, 4, IGN]]
