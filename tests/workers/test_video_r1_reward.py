"""Video-R1's reward (ROLL's VideoR1RewardWorker) on hand-made replies of each problem type, malformed ones
included; ROUGE against numbers worked out by hand (checked once against rouge_score 0.1.2: identical on 2,000
random pairs)."""

import pytest

from roll.configs import RewardConfig
from roll.distributed.data_proto import DataProto
from roll.utils.grading import RewardDataError
from roll.workers.rewards.video_r1 import (
    VideoR1RewardWorker,
    accuracy_reward,
    format_reward,
    rouge_mean,
    word_error_rate,
)


def wrap(answer, think="let me think"):
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


@pytest.mark.parametrize(
    "response, truth, kind, expected",
    [
        (wrap("B"), "<answer>B</answer>", "multiple choice", 1.0),
        (wrap("B. a cat"), "<answer>B</answer>", "multiple choice", 1.0),
        (wrap("\\boxed{C}"), "<answer>C</answer>", "multiple choice", 1.0),
        (wrap("A"), "<answer>B</answer>", "multiple choice", 0.0),
        ("B", "<answer>B</answer>", "multiple choice", 1.0),  # no tags: the whole reply is the answer
        (wrap("3.14"), "<answer>3.14159</answer>", "numerical", 1.0),  # equal at 2 decimals
        (wrap("3.15"), "<answer>3.14159</answer>", "numerical", 0.0),
        (wrap("3"), "<answer>3.0</answer>", "numerical", 0.0),  # one written with a decimal point, one not
        (wrap("1,000"), "<answer>1000.0</answer>", "numerical", 1.0),  # a comma counts as the decimal mark
        (wrap("many"), "<answer>3</answer>", "numerical", 0.0),
        (wrap("8"), "<answer>10</answer>", "regression", pytest.approx(0.8)),
        (wrap("30"), "<answer>10</answer>", "regression", pytest.approx(0.0)),  # relative error clipped at 1
        (wrap("ten"), "<answer>10</answer>", "regression", 0.0),  # ROLL crashes on a reply without a number
        (wrap("hello big world"), "<answer>hello world</answer>", "OCR", pytest.approx(0.5)),  # 1 insertion / 2
        (wrap("a b c d e"), "<answer>x</answer>", "OCR", 0.0),  # WER 5, clipped
        (wrap("the cats sat"), "<answer>The cat sat on the mat</answer>", "free-form", pytest.approx(40 / 63)),
    ],
)
def test_accuracy_by_problem_type(response, truth, kind, expected):
    assert accuracy_reward(response, truth, kind) == expected


def test_rouge_and_wer_by_hand():
    # tokens the cat sat on the mat / the cat sat ("cats" stemmed): R1 2/3, R2 4/7, RL 2/3
    assert rouge_mean("The cat sat on the mat", "the cats sat") == pytest.approx((2 / 3 + 4 / 7 + 2 / 3) / 3)
    assert rouge_mean("a b", "") == 0.0 and rouge_mean("", "") == 0.0
    assert word_error_rate("a b c", "a x c d") == pytest.approx(2 / 3)
    assert word_error_rate("", "a") == 1.0


def test_format_is_the_whole_reply():
    assert format_reward(wrap("B")) == 1.0
    assert format_reward("<think>x</think>  <answer>B</answer>") == 1.0
    assert format_reward("<answer>B</answer>") == 0.0
    assert format_reward(wrap("B") + " trailing") == 0.0
    assert format_reward("<think>unclosed <answer>B</answer>") == 0.0


def make_worker(monkeypatch, **reward_args):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0")
    return VideoR1RewardWorker(RewardConfig(name="rewards.video", worker_cls="x.Y", reward_args=reward_args), 0, 1)


def test_worker_adds_format_and_accuracy(monkeypatch):
    replies = [wrap("B"), "B", wrap("7"), "<think>never answers"]
    truths = ["<answer>B</answer>", "<answer>B</answer>", "<answer>7</answer>", "<answer>7</answer>"]
    kinds = ["multiple choice", "multiple choice", "numerical", "numerical"]
    batch = DataProto.from_dict(non_tensors={"response_text": replies, "ground_truth": truths, "reward_model": kinds})
    out = make_worker(monkeypatch).compute_rewards(batch)
    assert out.batch["scores"].tolist() == [2.0, 1.0, 2.0, 0.0]
    assert out.batch["metric_mean/format"].tolist() == [1.0, 0.0, 1.0, 0.0]


def test_worker_problem_type_sources(monkeypatch):
    batch = DataProto.from_dict(non_tensors={"response_text": [wrap("8")], "ground_truth": ["10"]})
    assert make_worker(monkeypatch, problem_type="regression").score(batch) == pytest.approx([1.8])
    with pytest.raises(RewardDataError, match="problem type None"):
        make_worker(monkeypatch).score(batch)
    batch.non_tensor_batch["problem_type"] = batch.non_tensor_batch["ground_truth"].copy()
    batch.non_tensor_batch["problem_type"][0] = "essay"
    with pytest.raises(RewardDataError, match="problem type 'essay'"):
        make_worker(monkeypatch).score(batch)
    with pytest.raises(ValueError, match="unknown keys"):
        make_worker(monkeypatch, kind="OCR").score(batch)
