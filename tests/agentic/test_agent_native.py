"""env_manager agent_native (ROLL's AgentNativeStepEnvManager) without Ray: tools declared to the chat template,
calls parsed from the generated tokens and answered as tool messages, token in and token out, malformed and
hostile calls answered and counted, the turn / token / time limits with their stop reasons."""

import time

import pytest

from roll.agentic.env_managers import AgentNativeEnvManager, ChatTokens
from roll.agentic.envs.tools.calculator import FUNCTION as CALCULATOR
from roll.agentic.envs.tools.python_code import FUNCTION as PYTHON
from roll.agentic.tool_calls import FunctionCall, render_call
from roll.configs.agentic import EnvConfig, ToolConfig, ToolWrapperArgs, ToolWrapperConfig
from roll.demo.tiny_model import build_tool_tokenizer

ENV = {"min_operand": 100, "max_operand": 499, "max_steps": 1}


@pytest.fixture(scope="module")
def chat():
    corpus = ["What is 482 + 739?", "Answer the arithmetic question. Give the result as <answer>N</answer>."]
    return ChatTokens(build_tool_tokenizer(corpus, [CALCULATOR, PYTHON]))


def manager(chat, tools=("calculator",), prompt_length=384, response_length=64, **env) -> AgentNativeEnvManager:
    wrapper = ToolWrapperConfig(
        ToolWrapperArgs(tool_reward=0.0, tool_success_reward=0.0, max_tool_uses=None),
        [ToolConfig(t, {"timeout": 2} if t == "python_code" else {}) for t in tools],
    )
    config = EnvConfig(env_type="arithmetic", env_config=dict(ENV), max_tokens_per_step=48, tool_wrapper=wrapper, **env)
    return AgentNativeEnvManager(0, "Sums", config, chat, -0.1, prompt_length, response_length)


def char_ids(chat, text: str) -> list[int]:
    """A reply spelled one byte-level token per character (the tool markers as their own tokens): decodes to
    `text`, while tokenising `text` merges them, as a sampling engine's ids can differ from the tokenizer's."""
    ids = []
    for piece in text.replace("<tool_call>", "\0<tool_call>\0").replace("</tool_call>", "\0</tool_call>\0").split("\0"):
        if piece in ("<tool_call>", "</tool_call>"):
            ids.append(chat.tokenizer.convert_tokens_to_ids(piece))
        else:
            tokens = chat.tokenizer.tokenize(piece)
            ids += [chat.tokenizer.convert_tokens_to_ids(ch) for token in tokens for ch in token]
    return ids + [chat.eos_token_id]


def play(m, replies: list[str], seed=5) -> list[list[int]]:
    m.start(seed, "g", "t")
    prompts = []
    for reply in replies:
        prompt = m.request()
        if prompt is None:
            break
        prompts.append(prompt)
        ids = char_ids(m.chat, reply)
        m.apply(ids, [-0.25] * len(ids))
    return prompts


def question(seed=5) -> tuple[str, int]:
    from roll.agentic.envs import make_env

    env = make_env("arithmetic", dict(ENV))
    env.reset(seed)
    return env.expression, env.answer


def test_a_call_runs_and_the_rows_hold_exactly_the_generated_tokens(chat):
    m = manager(chat)
    expression, answer = question()
    replies = [render_call(FunctionCall("calculator", {"expression": expression})), f"<answer>{answer}</answer>"]
    prompts = play(m, replies)
    episode = m.episode
    assert episode.done and episode.success and episode.end_reason == "done" and len(prompts) == 2
    # the first prompt: the template's own rendering with the tools declared and the instructions as system
    first = chat.tokenizer.apply_chat_template(
        [{"role": "system", "content": m.env.instructions}, {"role": "user", "content": f"What is {expression}?"}],
        tools=[CALCULATOR], add_generation_prompt=True, tokenize=False,
    )  # fmt: skip
    assert prompts[0] == chat.encode(first)
    # the second prompt: the first prompt, the ids the engine generated (not re-tokenised), then the tool message
    generated = char_ids(chat, replies[0])
    assert chat.encode(chat.decode(generated)) + [chat.eos_token_id] != generated  # the test can tell them apart
    assert prompts[1][: len(prompts[0]) + len(generated)] == prompts[0] + generated
    tail = chat.decode(prompts[1][len(prompts[0]) + len(generated) :])
    assert f"<tool_response>\n{answer}\n</tool_response>" in tail
    rows = m.samples()
    assert [r["prompt_ids"] for r in rows] == prompts
    for row, reply in zip(rows, replies):
        assert row["response_ids"] == char_ids(chat, reply) and set(row["response_mask"]) == {1}
        assert row["rollout_log_probs"] == [-0.25] * len(row["response_ids"])
    assert [r["score"] for r in rows] == [1.0, 1.0]  # the discounted return (γ = 1) of each turn
    stats = episode.stats()
    assert stats["tool_calls"] == 1 and stats["tool_ok"] == 1 and stats["tool_malformed"] == 0
    assert stats["stop_done"] == 1.0 and stats["stop_max_turns"] == 0.0


@pytest.mark.parametrize(
    ("reply", "seen"),
    [
        ("<tool_call>\n{calculator: 1}\n</tool_call>", "is not JSON"),
        ('<tool_call>\n{"name": "abacus", "arguments": {}}\n</tool_call>', "there is no function named 'abacus'"),
        ('<tool_call>\n{"name": "calculator", "arguments": {"expr": "1"}}\n</tool_call>', "missing argument"),
        ('<tool_call>\n{"name": "calculator", "arguments": {"expression": 7}}\n</tool_call>', "must be string"),
        ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 +', "has no closing"),
    ],
)
def test_a_malformed_call_is_answered_with_an_error_the_model_reads_and_counted(chat, reply, seen):
    m = manager(chat, max_turns=3)
    expression, answer = question()
    prompts = play(m, [reply, f"<answer>{answer}</answer>"])
    assert seen in chat.decode(prompts[1][len(prompts[0]) :])  # the error is in the next prompt
    stats = m.episode.stats()
    assert stats["tool_malformed"] == 1 and stats["tool_calls"] == 1 and stats["invalid_actions"] == 1
    assert m.episode.success  # the episode goes on
    assert m.episode.turns[0].reward == 0.0 and not m.episode.turns[0].valid


def test_a_tool_that_reports_an_error_is_a_failed_call(chat):
    m = manager(chat, max_turns=2)
    play(m, [render_call(FunctionCall("calculator", {"expression": "2 ** 99"})), "no answer"])
    assert m.episode.stats()["tool_failed"] == 1 and m.episode.end_reason == "done" and not m.episode.success
    assert "not an expression" in m.episode.turns[1].observation


def test_turn_token_and_time_limits_record_their_stop_reason(chat):
    call = render_call(FunctionCall("calculator", {"expression": "1 + 1"}))
    m = manager(chat, max_turns=2)
    play(m, [call, call, call])
    assert m.episode.end_reason == "max_turns" and len(m.episode.turns) == 2
    assert m.episode.stats()["stop_max_turns"] == 1.0
    first = len(manager(chat).chat.prompt_ids("What is 100 + 100?", "x", tools=[CALCULATOR]))
    m = manager(chat, max_turns=50, prompt_length=first + 200)
    play(m, [call] * 50)
    assert m.episode.end_reason == "length" and m.episode.stats()["truncated"] == 1.0
    assert all(len(r["prompt_ids"]) <= first + 200 for r in m.samples())
    m = manager(chat, max_turns=50, max_episode_seconds=0.2)
    m.start(5, "g", "t")
    ids = char_ids(chat, call)
    m.apply(ids, [0.0] * len(ids))
    time.sleep(0.3)
    m.apply(ids, [0.0] * len(ids))
    assert m.episode.end_reason == "time" and m.episode.stats()["stop_time"] == 1.0


def test_hostile_programs_are_contained_by_the_sandbox_and_counted(chat, tmp_path):
    """Through the python function: an escape attempt (a host file, the network), an output flood and a hang.
    Each runs in roll's sandbox within its limits; the episode goes on and the calls are counted as failed."""
    secret = tmp_path / "secret.txt"
    secret.write_text("S3CR3T-" + "4f1c")
    programs = [
        f"print(open({str(secret)!r}).read())",
        "import socket; socket.create_connection(('127.0.0.1', 22), timeout=1); print('CONN' + 'ECTED')",
        "import time; time.sleep(30)",
        "print('x' * 10_000_000)",
    ]
    m = manager(chat, tools=("python_code",), max_turns=6, prompt_length=4096, response_length=64)
    started = time.monotonic()
    play(m, [render_call(FunctionCall("python", {"code": p})) for p in programs[:3]] + ["<answer>0</answer>"])
    assert time.monotonic() - started < 20  # the hang was cut at the tool's 2 s
    observations = [t.observation for t in m.episode.turns[1:]]
    assert "S3CR3T-4f1c" not in " ".join(observations) and "CONNECTED" not in " ".join(observations)
    assert "Timed out" in observations[2]
    stats = m.episode.stats()
    assert stats["tool_calls"] == 3 and stats["tool_failed"] == 3 and m.episode.end_reason == "done"
    # the flood: the sandbox caps what it keeps; the tool message then does not fit the context: 'length'
    m = manager(chat, tools=("python_code",), max_turns=6, prompt_length=4096, response_length=64)
    play(m, [render_call(FunctionCall("python", {"code": programs[3]})), "<answer>0</answer>"])
    assert m.episode.end_reason == "length" and m.episode.stats()["tool_calls"] == 1
    assert [t["function"]["name"] for t in m.schemas] == [PYTHON["function"]["name"]]
