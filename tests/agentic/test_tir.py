"""env_manager tir: a call in the middle of a reply runs (python in roll's sandbox), its output is inserted as
untrained context, and generation continues in the same reply; what the engine generated after the call is
dropped; the row trains exactly the generated tokens it kept."""

import time

import pytest

from roll.agentic.env_managers import ChatTokens, TIREnvManager
from roll.configs.agentic import EnvConfig, ToolConfig, ToolWrapperArgs, ToolWrapperConfig
from roll.demo.tiny_model import build_tool_tokenizer

ENV = {"min_operand": 100, "max_operand": 499, "max_steps": 2}


@pytest.fixture(scope="module")
def chat():
    from roll.agentic.envs.tools.calculator import INSTRUCTIONS as CALCULATOR
    from roll.agentic.envs.tools.python_code import INSTRUCTIONS as PYTHON

    corpus = ["What is 482 + 739?", "Code execution result:", "<answer>1221</answer>", PYTHON, CALCULATOR]
    return ChatTokens(build_tool_tokenizer(corpus))


def manager(chat, tools=(("python_code", {"timeout": 2}),), response_length=512, **env) -> TIREnvManager:
    wrapper = ToolWrapperConfig(
        ToolWrapperArgs(tool_reward=0.1, tool_success_reward=0.2, max_tool_uses=env.pop("max_tool_uses", 3)),
        [ToolConfig(t, args) for t, args in tools],
    )
    config = EnvConfig(
        env_type="arithmetic", env_config=dict(ENV), max_tokens_per_step=128, tool_wrapper=wrapper, **env
    )
    return TIREnvManager(0, "Sums", config, chat, -0.1, 512, response_length)


def char_ids(chat, text: str, eos=True) -> list[int]:
    """One byte-level token per character (what tokenising the decoded text would merge)."""
    ids = [chat.tokenizer.convert_tokens_to_ids(ch) for token in chat.tokenizer.tokenize(text) for ch in token]
    return ids + ([chat.eos_token_id] if eos else [])


def play(m, chunks: list[str], seed=3) -> list[tuple[list[int], list[int]]]:
    """The test-double engine: each generate call returns the next scripted chunk. Returns (prompt, ids) pairs."""
    m.start(seed, "g", "t")
    calls = []
    for chunk in chunks:
        prompt = m.request()
        if prompt is None:
            break
        ids = char_ids(m.chat, chunk)
        calls.append((prompt, ids))
        m.apply(ids, [-0.5] * len(ids))
    return calls


def test_code_runs_mid_reply_and_only_the_kept_generated_tokens_are_trained(chat):
    m = manager(chat)
    m.start(3, "g", "t")
    expression, answer = m.env.expression, m.env.answer
    before = f"Let me compute. <code>print({expression})</code>"
    chunks = [before + " made up <answer>7</answer>", f" So <answer>{answer}</answer>"]
    calls = play(m, chunks)
    assert len(calls) == 2 and m.episode.done and m.episode.success
    (first_prompt, first_ids), (second_prompt, second_ids) = calls
    kept = char_ids(chat, before, eos=False)  # cut after the token that closes the call
    assert first_ids[: len(kept)] == kept
    inserted = second_prompt[len(first_prompt) + len(kept) :]
    assert chat.decode(inserted) == f"\nCode execution result: {answer}\n\n"  # the sandbox's output, as context
    assert second_prompt[: len(first_prompt) + len(kept)] == first_prompt + kept
    (row,) = m.samples()
    assert row["prompt_ids"] == first_prompt
    trained = [t for t, k in zip(row["response_ids"], row["response_mask"]) if k]
    assert trained == kept + second_ids  # the dropped tail was never trained; the output never is
    assert row["response_ids"] == kept + inserted + second_ids
    assert [lp for lp, k in zip(row["rollout_log_probs"], row["response_mask"]) if not k] == [0.0] * len(inserted)
    turn = m.episode.turns[0]
    assert turn.reply_ids == kept + second_ids and turn.prompt_ids == first_prompt
    assert turn.action == before + f" So <answer>{answer}</answer>"  # the env graded the model's own text
    assert turn.reward == pytest.approx(0.1 + 0.2 + 1.0)
    stats = m.episode.stats()
    assert stats["tool_calls"] == 1 and stats["tool_ok"] == 1 and stats["stop_done"] == 1.0


def test_max_tool_uses_stops_the_cutting(chat):
    m = manager(chat, max_tool_uses=1)
    code = "<code>print(1)</code>"
    calls = play(m, [code, code + " <answer>1</answer>"])
    assert len(calls) == 2 and m.episode.stats()["tool_calls"] == 1  # the second block is the reply's text
    assert m.episode.turns[0].action == code + code + " <answer>1</answer>"


def test_hostile_programs_are_contained_and_counted(chat):
    """Killing this test's process by its host PID (not visible from the sandbox's PID namespace), a hang, an
    output flood: contained, answered, counted as failed calls; the flood ends the episode at the token budget."""
    import os

    programs = [
        f"import os; os.kill({os.getpid()}, 9); print('KILL' + 'ED')",
        "import time; time.sleep(30)",
        "print('y' * 10_000_000)",
    ]
    m = manager(chat, response_length=100_000, max_tool_uses=5)
    started = time.monotonic()
    play(m, [f"<code>{p}</code>" for p in programs[:2]] + ["<answer>0</answer>"])
    assert time.monotonic() - started < 20
    (row,) = m.samples()
    context = chat.decode([t for t, k in zip(row["response_ids"], row["response_mask"]) if not k])
    assert "KILLED" not in context and "Timed out" in context
    assert m.episode.stats()["tool_failed"] == 2 and m.episode.end_reason == "done"
    m = manager(chat, response_length=2048)
    play(m, [f"<code>{programs[2]}</code>", "<answer>0</answer>"])
    assert m.episode.end_reason == "length" and m.episode.stats()["stop_length"] == 1.0
    assert len(m.samples()[0]["response_ids"]) <= 2048


def test_calculator_and_time_limit(chat):
    m = manager(chat, tools=(("calculator", {}),), max_episode_seconds=0.1)
    m.start(3, "g", "t")
    ids = char_ids(chat, "<calculator>6 * 7</calculator>")
    time.sleep(0.2)
    m.apply(ids, [0.0] * len(ids))
    assert m.episode.end_reason == "time" and m.episode.stats()["tool_ok"] == 1
