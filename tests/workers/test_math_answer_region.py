"""The math rule grades a reply's final answer: after the last </think>, inside the last <answer> block when there
is one (ROLL's vision-language prompts ask for <answer> tags); replies as a VL policy writes them."""

import pytest

from roll.configs import RewardConfig
from roll.distributed.data_proto import DataProto
from roll.workers.rewards.math_rule import MathRuleRewardWorker, final_answer_text, grade_final_answer


@pytest.mark.parametrize(
    "response, score",
    [
        ("<think>3 red and 2 blue, maybe 4</think>\n<answer>5</answer>", 1.0),
        ("<answer>5</answer>", 1.0),  # math-verify alone reads no number here
        ("<think>I see 5</think>\n<answer>3</answer>", 0.0),  # the reasoning's 5 is not the answer
        ("<think>I see 5</think>\nso \\boxed{3}", 0.0),
        ("<think>I see 5</think>", 0.0),  # nothing after the reasoning
        ("<think>count</think>\n<answer>\\frac{10}{2}</answer>", 1.0),
        ("<think>count</think>\n<answer>x = 5</answer>", 1.0),
        ("<answer>4</answer> no wait <answer>5</answer>", 1.0),  # the last block
        ("<answer>5", 0.0),  # unclosed: graded as it is, and math-verify reads no number in it
        ("\\boxed{5}", 1.0),  # text replies are unchanged
        ("The answer is 5.", 1.0),
        ("<answer>five</answer>", 0.0),
    ],
)
def test_final_answer_of_vl_style_replies(response, score):
    assert grade_final_answer(response, "5") == score


def test_final_answer_text():
    assert final_answer_text("<think>a</think> <answer> 7 </answer>") == "7"
    assert final_answer_text("plain 7") == "plain 7"


def test_require_boxed_reads_the_final_answer(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0")
    worker = MathRuleRewardWorker(RewardConfig(name="rewards.math", worker_cls="x.Y", require_boxed=True), 0, 1)
    worker.initialize()
    replies = [
        "<think>\\boxed{5}</think>\n<answer>\\boxed{3}</answer>",
        "<answer>\\boxed{5}</answer>",
        "<answer>5</answer>",
    ]
    batch = DataProto.from_dict(non_tensors={"response_text": replies, "ground_truth": ["5"] * 3})
    assert worker.score(batch) == [0.0, 1.0, 0.0]
