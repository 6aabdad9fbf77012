import pytest

from roll.configs import RewardConfig
from roll.distributed.data_proto import DataProto
from roll.utils.grading import RewardDataError
from roll.workers.rewards.choice_rule import (
    MultipleChoiceBoxedRuleRewardWorker,
    after_last_think,
    boxed_choice,
    final_choice,
    grade_boxed_choice,
    grade_choice,
)


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


# ---- ROLL's boxed rule (MultipleChoiceBoxedRuleRewardWorker) ----------------------------------------------


@pytest.mark.parametrize(
    "response, truth, score",
    [
        ("<think>A or C?</think>\n\\boxed{C}", "C", 1.0),
        ("\\boxed{(C)}", "C", 1.0),
        ("\\boxed{C. Paris}", "(C)", 1.0),
        ("\\boxed{c}", "C", 0.0),  # the first CAPITAL letter is the answer: none here
        ("\\boxed{The answer is C}", "C", 0.0),  # ... and here it is T (ROLL's rule)
        ("the answer is C", "C", 0.0),  # right but not boxed
        ("\\boxed{A} wait, no: \\boxed{C}", "C", 1.0),  # the last box
        ("<think>\\boxed{C}</think>\nI am not sure.", "C", 0.0),  # a box in the reasoning does not count
        ("<think>x</think>\n\\boxed{B}", "C", 0.0),
        ("", "C", 0.0),
        ("\\boxed{C", "C", 0.0),  # an unclosed box is no box
    ],
)
def test_boxed_choice_follows_roll(response, truth, score):
    assert grade_boxed_choice(response, truth) == score


def test_boxed_choice_parts_and_bad_truth():
    assert boxed_choice("so the answer is (B) I think") == ("B", False)
    assert boxed_choice("\\boxed{D}") == ("D", True)
    assert boxed_choice("no capital letters") == (None, False)
    assert after_last_think("<think>a</think>\n\n\\boxed{A}") == "\\boxed{A}"
    with pytest.raises(RewardDataError, match="does not start with a choice letter"):
        grade_boxed_choice("\\boxed{A}", "42")
    with pytest.raises(RewardDataError, match="does not start with a choice letter"):
        grade_boxed_choice("\\boxed{A}", "")


def test_boxed_choice_worker_records_the_boxed_share(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0")
    worker = MultipleChoiceBoxedRuleRewardWorker(RewardConfig(name="rewards.mc", worker_cls="x.Y"), 0, 1)
    replies = ["\\boxed{B}", "Answer: B", "\\boxed{A}"]
    batch = DataProto.from_dict(non_tensors={"response_text": replies, "ground_truth": ["B"] * 3})
    out = worker.compute_rewards(batch)
    assert out.batch["scores"].tolist() == [1.0, 0.0, 0.0]
    assert out.batch["metric_mean/boxed"].tolist() == [1.0, 0.0, 1.0]
