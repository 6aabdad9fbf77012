"""The SmolLM2 example's final-answer reward (examples/smollm2_rlvr/final_answer.py): the last boxed answer,
else the last number, must equal the ground truth; restating the question earns nothing (math-verify on
the whole reply credits "19 + 11 = ?" for 30)."""

import importlib.util
from pathlib import Path

import pytest

from roll.utils.math_grader import grade_math

PATH = Path(__file__).resolve().parents[2] / "examples" / "smollm2_rlvr" / "final_answer.py"
spec = importlib.util.spec_from_file_location("final_answer", PATH)
final_answer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(final_answer)


@pytest.mark.parametrize(
    "reply,score",
    [
        ("19 + 11 = 30", 1.0),
        ("19 + 11 = \\boxed{30}.", 1.0),
        ("\\boxed{30} because 19 + 11", 1.0),  # a box wins over later numbers
        ("The answer is 30", 1.0),
        ("19 + 11 = \\boxed{29}, no: 30", 0.0),
        ("19 + 11 = ?", 0.0),
        ("19 + 11", 0.0),
        ("adding gives you 17", 0.0),
        ("13 + 17 = \\boxed{}30", 0.0),  # an empty box is the final answer
        ("no number", 0.0),
    ],
)
def test_final_answer(reply, score):
    assert final_answer.grade_final_answer(reply, "30") == score


def test_math_verify_credits_restated_question():
    """Why the example does not use the math rule reward: this must stay true for the docs' claim."""
    assert grade_math("19 + 11 = ?", "30") == 1.0
