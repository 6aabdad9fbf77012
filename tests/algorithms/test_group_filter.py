"""Dynamic sampling's group filter (roll.algorithms.group_filter) on hand-computed groups."""

import pytest
import torch

from roll.algorithms.group_filter import keep_groups

GROUPS = torch.tensor(
    [
        [0.0, 0.0, 0.0, 0.0],  # all wrong: mean 0, std 0
        [1.0, 1.0, 1.0, 1.0],  # all right: mean 1, std 0
        [1.0, 0.0, 0.0, 0.0],  # mean 0.25, std 0.5
        [1.0, 1.0, 1.0, 0.0],  # mean 0.75, std 0.5
        [0.5, 0.5, 0.5, 0.5],  # equal but not 0/1: mean 0.5, std 0
    ]
)


def test_no_filter_keeps_everything():
    assert keep_groups(GROUPS, "no_filter", {}).tolist() == [True] * 5


def test_std_filter_zero_drops_exactly_the_all_equal_groups():
    assert keep_groups(GROUPS, "std_filter", {"std_threshold": 0.0}).tolist() == [False, False, True, True, False]
    # the threshold itself is dropped (std <= threshold): std 0.5 with threshold 0.5 goes
    assert keep_groups(GROUPS, "std_filter", {"std_threshold": 0.5}).tolist() == [False] * 5
    assert keep_groups(GROUPS, "std_filter", {}).tolist() == [True] * 5  # default -1 keeps all


def test_mean_filter_band_is_exclusive():
    keep = keep_groups(GROUPS, "mean_filter", {"threshold_down": 0.0, "threshold_up": 1.0})
    assert keep.tolist() == [False, False, True, True, True]
    keep = keep_groups(GROUPS, "mean_filter", {"threshold_down": 0.25, "threshold_up": 0.75})
    assert keep.tolist() == [False, False, False, False, True]
    assert keep_groups(GROUPS, "mean_filter", {}).tolist() == [True] * 5  # defaults: (-1, inf)


def test_single_sample_groups_are_kept_and_bad_input_is_named():
    assert keep_groups(torch.zeros(3, 1), "std_filter", {"std_threshold": 0.0}).tolist() == [True] * 3
    with pytest.raises(ValueError, match="'median_filter'"):
        keep_groups(GROUPS, "median_filter", {})
    with pytest.raises(ValueError, match=r"\[groups, samples\]"):
        keep_groups(GROUPS.flatten(), "std_filter", {})


def test_boxed_format_reward():
    from roll.workers.rewards.format_rule import grade_format

    assert grade_format("so \\boxed{12}", None) == 1.0
    assert grade_format("\\boxed{\\frac{1}{2}} done", "x") == 1.0  # nested braces close
    for response in ("12", "\\boxed{}", "\\boxed{  }", "\\boxed{12", "boxed{12}"):
        assert grade_format(response, "12") == 0.0, response
    assert grade_format("\\boxed{} then \\boxed{3}", None) == 1.0  # a later well-formed box counts
