import pytest

from roll.workers.rewards.choice_rule import final_choice, grade_choice


@pytest.mark.parametrize(
    "response, expected",
    [
        ("The answer is (C).", "C"),
        ("Reasoning... so \\boxed{B}", "B"),
        ("Answer: d", "D"),
        ("first I thought A\nthen\nE", "E"),
        ("Both A and B look wrong. Answer: B", "B"),
        ("no letter commits here", None),
        ("Answer is Apple", None),  # a word starting with a letter is not a choice
    ],
)
def test_final_choice(response, expected):
    assert final_choice(response) == expected


def test_grade_choice_and_bad_ground_truth():
    assert grade_choice("Answer: C", "C") == 1.0
    assert grade_choice("Answer: C", "(c)") == 1.0
    assert grade_choice("Answer: A", "C") == 0.0
    with pytest.raises(ValueError, match="ground_truth 'forty' is not a single letter"):
        grade_choice("Answer: A", "forty")
