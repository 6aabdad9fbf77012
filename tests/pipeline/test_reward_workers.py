"""The IFEval rule, CrossThinkQA and LLM-judge reward workers on hand-made replies; the judge through a real
local OpenAI-compatible HTTP server serving the tiny demo model."""

import contextlib
import json
import logging
import threading
from types import SimpleNamespace

import pytest
import torch

from roll.distributed.data_proto import DataProto
from roll.utils.grading import RewardDataError
from roll.workers.rewards.crossthinkqa_rule import CrossThinkQARuleRewardWorker, length_reward, repetition_penalty
from roll.workers.rewards.ifeval_rule import GeneralRuleRewardWorker, grade_ifeval
from roll.workers.rewards.judge_server import api_url, make_server
from roll.workers.rewards.llm_judge import chat_completion, parse_verdict


def spec(*pairs):
    return json.dumps({"instruction_id_list": [p[0] for p in pairs], "kwargs": [p[1] for p in pairs]})


def test_ifeval_checks_follow_the_instructions():
    no_comma = spec(("punctuation:no_comma", {}))
    assert grade_ifeval("Fine and dandy.", no_comma) == 1.0
    assert grade_ifeval("Fine, and dandy.", no_comma) == 0.0
    lower = spec(("punctuation:no_comma", {}), ("keywords:existence", {"keywords": ["apple"]}))
    assert grade_ifeval("i like apple pie", lower) == 1.0
    assert grade_ifeval("I like pears, yes", lower) == 0.0
    assert grade_ifeval("i like pears", lower) == 0.5
    words = spec(("length_constraints:number_words", {"num_words": 5, "relation": "less than"}))
    assert grade_ifeval("one two three", words) == 1.0 and grade_ifeval("one two three four five six", words) == 0.0
    sentences = spec(("length_constraints:number_sentences", {"num_sentences": 2, "relation": "at least"}))
    assert grade_ifeval("It rains. It pours.", sentences) == 1.0 and grade_ifeval("It rains.", sentences) == 0.0
    caps = spec(("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "at least"}))
    assert grade_ifeval("WOW this is BIG", caps) == 1.0 and grade_ifeval("wow", caps) == 0.0
    as_json = spec(("detectable_format:json_format", {}))
    assert grade_ifeval('{"a": 1}', as_json) == 1.0 and grade_ifeval("a: 1", as_json) == 0.0


def test_ifeval_bad_rows_name_the_problem():
    with pytest.raises(RewardDataError, match="unknown instruction ids"):
        grade_ifeval("x", spec(("punctuation:no_semicolon", {})))
    with pytest.raises(RewardDataError, match="not JSON"):
        grade_ifeval("x", "no_comma")
    with pytest.raises(RewardDataError, match="one dict per instruction"):
        grade_ifeval("x", json.dumps({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]}))


def test_crossthinkqa_length_and_repetition():
    assert [length_reward(w) for w in (50, 99, 100, 250, 400, 401)] == [-0.5, -0.5, -0.5, -0.25, 0.0, 0.0]
    assert repetition_penalty("a b c a b c a b c", 3, -1.0) == pytest.approx(-(1 - 3 / 7))
    assert repetition_penalty("a b c d e", 3, -1.0) == 0.0 and repetition_penalty("a a a a", 3, 0.0) == 0.0


def test_judge_verdict_parsing():
    assert parse_verdict("YES, it matches", "yes_no", 10) == 1.0
    assert parse_verdict("no.", "yes_no", 10) == 0.0
    assert parse_verdict("I cannot tell", "yes_no", 10) is None
    assert parse_verdict("Score: 7", "score", 10) == 0.7 and parse_verdict("12/10", "score", 10) == 1.0
    with pytest.raises(ValueError, match="judge_verdict"):
        parse_verdict("yes", "grade", 10)


@contextlib.contextmanager
def serve(model_dir):
    """The judge server on a free local port, in a thread of this process; yields its /v1 base URL."""
    server = make_server(str(model_dir))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield api_url(server)  # what the server prints for judge_api_url
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def judge_url(demo_dir):
    with serve(demo_dir / "model") as url:
        yield url


def test_judge_over_http_serves_the_local_model(judge_url):
    reply = chat_completion(judge_url, "judge", "What is 2+3?", max_tokens=8, timeout=60, retries=0)
    assert isinstance(reply, str) and reply  # the model's own greedy continuation
    again = chat_completion(judge_url, "judge", "What is 2+3?", max_tokens=8, timeout=60, retries=0)
    assert again == reply  # greedy: deterministic
    with pytest.raises(RuntimeError, match="failed 2 times"):
        chat_completion(judge_url.replace("/v1", "/nope"), "judge", "x", max_tokens=4, timeout=5, retries=1)


def bare_worker(cls, **config):
    """The worker's scoring on a hand-made batch, without starting a Ray actor."""
    worker = cls.__new__(cls)
    worker.worker_name = "rewards.test"
    worker.worker_config = SimpleNamespace(
        **{"reward_args": {}, "timeout": 5.0, "response_length_penalty_coef": 0.0, "reward_type": None, **config}
    )
    return worker


def test_ifeval_worker_reads_prompt_and_all_or_nothing():
    truth = spec(("combination:repeat_prompt", {"prompt_to_repeat": "say hi"}), ("punctuation:no_comma", {}))
    batch = DataProto.from_dict(
        tensors={"responses": torch.zeros(3, 4)},
        non_tensors={
            "prompt_text": ["say hi"] * 3,
            "response_text": ["say hi and bye", "say hi, bye", "bye, bye"],
            "ground_truth": [truth] * 3,
        },
    )
    assert bare_worker(GeneralRuleRewardWorker).score(batch) == [1.0, 0.5, 0.0]
    assert bare_worker(GeneralRuleRewardWorker, reward_args={"all_or_nothing": True}).score(batch) == [1.0, 0.0, 0.0]


def test_crossthinkqa_worker_sums_in_float16():
    batch = DataProto.from_dict(
        tensors={"responses": torch.zeros(2, 250)},  # padded width 250: length reward −0.25
        non_tensors={"response_text": ["the answer is (B)", "Answer: C"], "ground_truth": ["B", "B"]},
    )
    worker = bare_worker(CrossThinkQARuleRewardWorker)
    worker.worker_config.response_length_penalty_coef = 0.1
    penalty = torch.tensor(0.1, dtype=torch.float16) * torch.tensor(-0.25, dtype=torch.float16)
    assert worker.score(batch) == [float(1 + penalty), float(penalty)]
    worker.worker_config.reward_args = {"max_penalty": 0.5}
    with pytest.raises(ValueError, match="max_penalty"):
        worker.score(batch)


@pytest.mark.parametrize(
    "reward_type,expected",  # rows: right+boxed, right unboxed ("answer is"), wrong+boxed, wrong unboxed
    [("loose", [1.0, 1.0, -1.0, -1.0]), ("soft", [1.0, 0.5, -0.5, -1.0]), ("strict", [1.0, -1.0, -1.0, -1.0])],
)
def test_crossthinkqa_reward_type_follows_roll_s_table(reward_type, expected):
    replies = ["so \\boxed{B}", "the answer is B, I think", "\\boxed{(C) maybe}", "no idea"]
    batch = DataProto.from_dict(
        tensors={"responses": torch.zeros(4, 500)},  # width > 400: no length reward
        non_tensors={"response_text": replies, "ground_truth": ["B"] * 4},
    )
    assert bare_worker(CrossThinkQARuleRewardWorker, reward_type=reward_type).score(batch) == expected


def test_judge_prompt_names_and_templates_are_checked():
    from roll.configs import ConfigError
    from roll.configs.worker import RewardConfig
    from roll.workers.rewards.llm_judge import DEFAULT_PROMPT, LLMJudgeRewardWorker

    worker = bare_worker(LLMJudgeRewardWorker, judge_prompt="Qwen2.5-7B-Instruct-RLVR-prompt")
    batch = DataProto.from_dict(
        tensors={"responses": torch.zeros(1, 4)},
        non_tensors={"prompt_text": ["Q?"], "response_text": ["5"], "ground_truth": ["5"]},
    )
    assert worker.judge_prompts(batch) == [DEFAULT_PROMPT.format(question="Q?", response="5", reference="5")]
    with pytest.raises(ConfigError, match="judge_prompt' has no {response}"):
        RewardConfig(name="rewards.judge", judge_prompt="Qwen2.5-72B-prompt")
    with pytest.raises(ConfigError, match="not a template of {question}"):
        RewardConfig(name="rewards.judge", judge_prompt="{question} {answer} {response}")


def test_judge_worker_over_the_api(judge_url):
    """judge_model_type 'api': concurrent requests to the local server; a dead endpoint scores 0, counted."""
    from roll.utils.grading import ERROR
    from roll.workers.rewards.llm_judge import LLMJudgeRewardWorker

    settings = {
        "judge_model_type": "api", "judge_api_url": judge_url, "judge_api_model": "judge", "judge_api_key_env": None,
        "judge_prompt": "{question} Reply: {response} Score it.", "judge_verdict": "score", "judge_score_max": 10.0,
        "judge_max_new_tokens": 6, "judge_retries": 0, "judge_batch_size": 2, "timeout": 60.0,
    }  # fmt: skip
    worker = bare_worker(LLMJudgeRewardWorker, **settings)
    batch = DataProto.from_dict(
        tensors={"responses": torch.zeros(3, 4)},
        non_tensors={"prompt_text": ["What is 2+3?"] * 3, "response_text": ["5", "6", "7"], "ground_truth": ["5"] * 3},
    )
    expected = [
        parse_verdict(chat_completion(judge_url, "judge", f"What is 2+3? Reply: {r} Score it.", 6, 60, 0), "score", 10)
        for r in ("5", "6", "7")
    ]
    assert None not in expected and worker.score(batch) == pytest.approx(expected)
    worker.worker_config.judge_api_url = judge_url.replace("/v1", "/gone")
    worker._grading_status, worker._failures_logged, worker.logger = torch.zeros(3, dtype=torch.int8), 0, logging
    assert worker.score(batch) == [0.0, 0.0, 0.0] and worker._grading_status.tolist() == [ERROR] * 3
