"""Env managers without Ray: token-in-token-out, step-wise samples and returns, budgets, reward maths."""

import numpy as np
import pytest
import torch

from roll.agentic.env_managers import ChatTokens, StepConcatEnvManager, StepEnvManager, TrajEnvManager
from roll.agentic.envs import make_env
from roll.configs.agentic import EnvConfig
from roll.demo.tiny_model import build_tokenizer
from roll.pipeline.agentic.episode_scores import normalize_scores
from roll.pipeline.agentic.pipeline import LOSS_KEYS
from roll.pipeline.agentic.rollout import to_batch
from roll.utils.functional import scores_on_last_token

ACTIONS = ["Left", "Down", "Right", "Up"]


@pytest.fixture(scope="module")
def chat():
    env = make_env("frozen_lake", {})
    corpus = [env.instructions, env.reset(seed=0), *ACTIONS, "Earlier state:", "Your action:", "Invalid action."]
    return ChatTokens(build_tokenizer(corpus))


def char_ids(chat, text: str) -> list[int]:
    """A reply spelled one byte-level token per character: decodes to `text`, but tokenizing `text`
    gives different (merged) ids: what a sampling engine can produce."""
    return [chat.tokenizer.convert_tokens_to_ids(c) for c in text] + [chat.eos_token_id]


def play(manager, replies, seed=3):
    """Drive a manager like the environment worker does; returns the prompts it asked with."""
    manager.start(seed, "g0", "t0")
    prompts = []
    for reply in replies:
        prompt = manager.request()
        if prompt is None:
            break
        prompts.append(prompt)
        manager.apply(reply, [-0.5] * len(reply))
    return prompts


def test_trajectory_trains_exactly_the_generated_tokens(chat):
    env = EnvConfig(env_type="frozen_lake", max_turns=4, max_tokens_per_step=8)
    manager = TrajEnvManager(0, "FrozenLake", env, chat, -0.1, prompt_length=128, response_length=256)
    replies = [
        char_ids(chat, "Right"),
        char_ids(chat, "Down"),
        chat.encode("Down") + [chat.eos_token_id],
        char_ids(chat, "Left"),
    ]
    # the test is only meaningful if re-tokenising the decoded reply changes the ids
    assert chat.encode(chat.decode(replies[0])) + [chat.eos_token_id] != replies[0]
    prompts = play(manager, replies)
    (row,) = manager.samples()
    generated = [t for t, m in zip(row["response_ids"], row["response_mask"]) if m == 1]
    assert generated == [t for reply in replies[: len(prompts)] for t in reply]
    context = row["prompt_ids"] + row["response_ids"]
    for turn, prompt in enumerate(prompts):  # each turn was generated from a prefix of the trained sequence
        assert context[: len(prompt)] == prompt, f"turn {turn}"
    assert row["prompt_ids"] == prompts[0]
    assert row["rollout_log_probs"] == [-0.5 if m else 0.0 for m in row["response_mask"]]
    # the observations between replies are the chat template's tokens, not trained
    first_obs = manager.episode.turns[1].observation
    start = len(replies[0])
    obs_ids = chat.observation_ids(first_obs)
    assert row["response_ids"][start : start + len(obs_ids)] == obs_ids
    assert row["response_mask"][start : start + len(obs_ids)] == [0] * len(obs_ids)


def test_cut_reply_gets_an_untrained_end_of_turn(chat):
    env = EnvConfig(env_type="frozen_lake", max_turns=2, max_tokens_per_step=3)
    manager = TrajEnvManager(0, "FrozenLake", env, chat, 0.0, prompt_length=128, response_length=256)
    cut = [chat.tokenizer.convert_tokens_to_ids(c) for c in "Dow"]  # no EOS: cut at max_tokens_per_step
    play(manager, [cut, cut])
    (row,) = manager.samples()
    assert row["response_ids"][:4] == cut + [chat.eos_token_id]
    assert row["response_mask"][:4] == [1, 1, 1, 0]
    assert row["invalid_actions"] == 2 and row["score"] == 0.0


def test_format_penalty_and_episode_score(chat):
    env = EnvConfig(env_type="frozen_lake", max_turns=3, max_tokens_per_step=8)
    manager = TrajEnvManager(0, "FrozenLake", env, chat, -0.1, prompt_length=128, response_length=256)
    play(manager, [char_ids(chat, "jump"), char_ids(chat, "jump"), char_ids(chat, "jump")])
    (row,) = manager.samples()
    assert row["score"] == pytest.approx(-0.3)
    assert manager.episode.end_reason == "max_turns" and row["num_turns"] == 3


def test_token_budget_ends_the_episode(chat):
    env = EnvConfig(env_type="frozen_lake", max_turns=10, max_tokens_per_step=8)
    manager = TrajEnvManager(0, "FrozenLake", env, chat, 0.0, prompt_length=128, response_length=40)
    play(manager, [char_ids(chat, "Left")] * 10)
    assert manager.episode.end_reason == "length"
    (row,) = manager.samples()
    assert len(row["response_ids"]) <= 40 and row["truncated"] == 1.0


def test_last_turn_is_cut_to_the_room_left_as_rolls(chat):
    # ROLL: a turn generates min(max_tokens_per_step, what the row has left); the episode ends only when an
    # observation leaves no room (roll keeps one token for the end-of-turn token of a cut reply)
    env = EnvConfig(env_type="frozen_lake", max_turns=20, max_tokens_per_step=8)
    # 33: a full first turn (8 + end token) and the next observation leave fewer than 8 tokens for a second reply
    manager = TrajEnvManager(0, "FrozenLake", env, chat, 0.0, prompt_length=128, response_length=33)
    manager.start(3, "g0", "t0")
    budgets = []
    while manager.request() is not None:
        used = len(manager.trajectory.response_ids)
        budgets.append(manager.max_new_tokens)
        assert budgets[-1] == min(8, 33 - used - 1)
        manager.apply([chat.tokenizer.convert_tokens_to_ids("L")] * budgets[-1], [0.0] * budgets[-1])  # cut
    (row,) = manager.samples()
    assert manager.episode.end_reason == "length" and len(row["response_ids"]) == 33
    assert len(budgets) == 2 and budgets[0] == 8 and 0 < budgets[1] < 8  # the old rule: no second turn


def test_step_manager_one_sample_per_turn_with_discounted_returns(chat):
    env = EnvConfig(env_type="frozen_lake", env_manager="step", max_turns=3, max_tokens_per_step=8, history_length=1)
    manager = StepEnvManager(0, "FrozenLake", env, chat, -1.0, prompt_length=256, response_length=16, gamma=0.5)
    replies = [char_ids(chat, "jump"), char_ids(chat, "Right"), char_ids(chat, "jump")]
    prompts = play(manager, replies)
    rows = manager.samples()
    assert len(rows) == 3
    for row, reply, prompt in zip(rows, replies, prompts):
        assert row["prompt_ids"] == prompt and row["response_ids"] == reply and row["response_mask"] == [1] * len(reply)
    # rewards −1, 0, −1 (two invalid replies): returns G2 = −1, G1 = 0 + 0.5·(−1), G0 = −1 + 0.5·G1
    assert [r["score"] for r in rows] == pytest.approx([-1.25, -0.5, -1.0])
    # the window: the third prompt shows the second turn only (history_length 1)
    third = chat.decode(prompts[2])
    assert third.count("Earlier state:") == 1 and "Your action: Right" in third


def test_roll_env_keys_shape_prompts_and_parse_replies(chat):
    """ROLL's per-environment keys: system and turn templates, env_instruction, action_pattern (its last group is
    the action) and the environment's own format_penalty."""
    import copy

    from roll.demo.tiny_model import CHAT_TEMPLATE

    tokenizer = copy.deepcopy(chat.tokenizer)
    system = "{% for m in messages %}{% if m['role'] == 'system' %}[{{ m['content'] }}]{% endif %}{% endfor %}"
    tokenizer.chat_template = system + CHAT_TEMPLATE
    with_system = ChatTokens(tokenizer)
    env = EnvConfig(
        env_type="frozen_lake",
        max_turns=3,
        max_tokens_per_step=8,
        agent_system_template="Play well.",
        agent_template="Turn {turn_idx}: {observation} ({actions_left} left, {max_response_length} tokens)",
        env_instruction="Reach G.",
        action_pattern=r"<think>(.*?)</think>\s*<answer>(.*?)</answer>",
        format_penalty=-0.5,
    )
    manager = TrajEnvManager(0, "FrozenLake", env, with_system, -0.1, prompt_length=256, response_length=512)
    replies = [
        chat.encode(text) + [chat.eos_token_id] for text in ("<think>go</think> <answer>Right</answer>", "Right")
    ]
    play(manager, replies)
    row = manager.samples()[0]
    first = with_system.decode(row["prompt_ids"])
    assert first.startswith("[Play well.]") and "Reach G.\nTurn 1: " in first and "(3 left, 8 tokens)" in first
    assert "frozen lake" not in first  # env_instruction replaces the environment's own instructions
    assert "Turn 2: " in with_system.decode(row["response_ids"]) and "(2 left, 8 tokens)" in with_system.decode(
        row["response_ids"]
    )
    turns = manager.episode.turns
    assert [t.valid for t in turns] == [True, False]  # the bare reply misses the <think> pattern
    assert turns[1].reward == -0.5  # the environment's format_penalty, not the manager's -0.1
    with pytest.raises(ValueError, match="drops system messages"):
        play(TrajEnvManager(0, "FrozenLake", env, chat, 0.0, prompt_length=256, response_length=512), replies)


def test_user_env_by_dotted_path(chat):
    env = EnvConfig(env_type="tests.agentic.user_env_module.CountdownEnv", max_turns=5, max_tokens_per_step=8)
    manager = TrajEnvManager(0, "Countdown", env, chat, 0.0, prompt_length=128, response_length=128)
    replies = [chat.encode(word) + [chat.eos_token_id] for word in ("wait", "wait", "go")]
    play(manager, replies, seed=0)  # start 2 + 0 % 2 = 2: wait, wait, go
    assert manager.episode.success and manager.samples()[0]["score"] == 1.0


def test_normalize_scores_by_group_and_batch():
    """ROLL's agentic_reward_norm (roll/pipeline/agentic/utils.py): torch's unbiased std; a group of one row or
    with std ≤ 1e-6 gives 0, whatever the mean type."""
    scores = torch.tensor([1.0, 0.0, 3.0, 1.0])
    groups = np.array(["a", "a", "b", "b"], dtype=object)
    assert normalize_scores(scores, groups, "group", None).tolist() == [0.5, -0.5, 1.0, -1.0]
    assert normalize_scores(scores, groups, "batch", None).tolist() == pytest.approx([-0.25, -1.25, 1.75, -0.25])
    # a: (1, 0), unbiased std √½; b: (3, 1), std √2 → ±0.5/√½ and ±1/√2, all ±1/√2
    scaled = normalize_scores(scores, groups, "group", "group")
    half = 0.5 / (0.5**0.5 + 1e-6)
    assert scaled.tolist() == pytest.approx([half, -half, 1 / (2**0.5 + 1e-6), -1 / (2**0.5 + 1e-6)], rel=1e-6)
    # batch std: mean 1.25, squared deviations sum to 4.75, unbiased std √(4.75/3)
    std = (4.75 / 3) ** 0.5
    assert normalize_scores(scores, groups, "batch", "batch").tolist() == pytest.approx(
        [(s - 1.25) / (std + 1e-6) for s in (1.0, 0.0, 3.0, 1.0)], rel=1e-6
    )
    assert normalize_scores(scores, groups, None, None).tolist() == scores.tolist()


def test_normalize_scores_is_zero_on_a_degenerate_group():
    # batch mean 2, group std: c is one row, d is constant — both 0 (the population std gave (x − 2)/1e-6 ≈ 1e6)
    scores = torch.tensor([1.0, 3.0, 3.2, 0.9, 0.9])
    groups = np.array(["a", "a", "c", "d", "d"], dtype=object)
    out = normalize_scores(scores, groups, "batch", "group")
    mean = float(scores.mean())
    std_a = 2**0.5
    assert out.tolist() == pytest.approx([(1 - mean) / (std_a + 1e-6), (3 - mean) / (std_a + 1e-6), 0, 0, 0])
    # a one-row group is 0 even with the batch std (ROLL checks the group's row count)
    assert normalize_scores(scores, groups, "batch", "batch")[2] == 0
    assert normalize_scores(torch.tensor([4.0]), np.array(["x"], dtype=object), "batch", "batch").tolist() == [0]


def test_token_level_score_sits_on_the_last_generated_token():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0, 0], [1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]], dtype=torch.float32)
    out = scores_on_last_token(torch.tensor([2.0, 3.0, 4.0]), mask)
    assert out[0].tolist() == [0, 0, 0, 0, 2.0, 0, 0]
    assert out[1].tolist() == [3.0, 0, 0, 0, 0, 0, 0]
    assert out[2].abs().sum() == 0  # a padding row carries nothing


def test_batch_layout_and_loss_free_padding(chat):
    rows = [
        {
            "prompt_ids": [5, 6],
            "response_ids": [7, 8, 9],
            "response_mask": [1, 0, 1],
            "rollout_log_probs": [-1.0, 0.0, -2.0],
            "score": 1.0,
            "tag": "T",
            "traj_group_id": "g",
            "traj_id": "t",
            "env_id": 0,
            "success": 1.0,
            "num_turns": 2,
            "invalid_actions": 0,
            "truncated": 0.0,
        }
    ]
    batch = to_batch(rows, prompt_length=4, response_length=5, pad_token_id=0)
    assert batch.batch["input_ids"][0].tolist() == [0, 0, 5, 6, 7, 8, 9, 0, 0]
    assert batch.batch["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1, 1, 0, 0]
    assert batch.batch["response_mask"][0].tolist() == [1, 0, 1, 0, 0]
    assert batch.batch["position_ids"][0].tolist()[2:7] == [0, 1, 2, 3, 4]
    batch.batch["token_level_scores"] = scores_on_last_token(batch.batch["scores"], batch.batch["response_mask"])
    batch.non_tensor_batch["uid"] = batch.non_tensor_batch["traj_group_id"]
    padded, added = batch.pad_to_multiple(4, loss_free_keys=LOSS_KEYS)
    assert added == 3
    assert len(padded) == 4 and padded.batch["response_mask"][1:].sum() == 0
    assert list(padded.non_tensor_batch["uid"][1:]) == ["padding-0", "padding-1", "padding-2"]
    with pytest.raises(ValueError, match="response_length 2"):
        to_batch(rows, prompt_length=4, response_length=2, pad_token_id=0)


def test_step_concat_manager_joins_earlier_observations_and_the_suffix(chat):
    """ROLL's StepConcatEnvManager: {history} = the earlier observations of a window of history_length turns (the
    current one counts), one per line, no actions; {current_observation} = the observation, a newline, the last
    info['suffix']; the rows are the step manager's (one per turn, discounted returns)."""
    from roll.agentic.env_managers import MANAGERS

    assert MANAGERS["step_concat"] is StepConcatEnvManager
    env = EnvConfig(
        env_type="tests.agentic.user_env_module.HintEnv",
        env_manager="step_concat",
        max_turns=4,
        max_tokens_per_step=8,
        history_length=3,
        agent_template="Obs:\n{history}\n{current_observation}\nEnd.",
    )
    manager = StepConcatEnvManager(0, "Hint", env, chat, 0.0, prompt_length=256, response_length=16, gamma=0.5)
    manager.start(0, "g0", "t0")
    texts = []
    for word in ("1", "2", "3"):
        texts.append(manager._render())
        prompt = manager.request()
        manager.apply(chat.encode(word) + [chat.eos_token_id], [-0.5] * (len(chat.encode(word)) + 1))
        assert texts[-1] in chat.decode(prompt)  # the request carries the rendered text
    assert texts == [
        "Obs:\n\nGuess a number from 1 to 4.\n\nEnd.",  # no history yet; reset gives no suffix
        "Obs:\nGuess a number from 1 to 4.\nTurn 1: you said 1.\nGuess 2?\nEnd.",
        "Obs:\nGuess a number from 1 to 4.\nTurn 1: you said 1.\nTurn 2: you said 2.\nGuess 3?\nEnd.",
    ]
    manager.start(0, "g1", "t1")  # a new episode starts with an empty window
    assert manager._render() == texts[0]
    manager.env_config = EnvConfig(env_type="x.Y", env_manager="step_concat", history_length=1)  # no template
    assert manager._render() == "Guess a number from 1 to 4.\n"


def test_step_concat_rows_are_step_rows(chat):
    env = EnvConfig(
        env_type="tests.agentic.user_env_module.HintEnv",
        env_manager="step_concat",
        max_turns=4,
        max_tokens_per_step=8,
        history_length=2,
    )
    manager = StepConcatEnvManager(0, "Hint", env, chat, 0.0, prompt_length=256, response_length=16, gamma=0.5)
    replies = [chat.encode(w) + [chat.eos_token_id] for w in ("1", "2", "3")]
    prompts = play(manager, replies, seed=0)
    rows = manager.samples()
    assert manager.episode.success and len(rows) == 3
    assert [r["prompt_ids"] for r in rows] == prompts and [r["response_ids"] for r in rows] == replies
    assert [r["score"] for r in rows] == pytest.approx([0.25, 0.5, 1.0])  # rewards 0, 0, 1 with γ = 0.5
    assert "Turn 1: you said 1.\nGuess 2?" in chat.decode(prompts[1])
