"""GEM's game:GuessTheNumber-v0 and rg:letter_counting built in roll: hand-played episodes (observations, rewards,
termination as GEM 0.0.4 scores them), env_config errors, and the step_concat prompt with GEM's suffix."""

import random
import re

import pytest

from roll.agentic.envs import make_env
from roll.agentic.envs.letter_counting import WORDS

GUESS = "game:GuessTheNumber-v0"


def game(seed=3, **config):
    env = make_env(GUESS, {"min_number": 1, "max_number": 20, "max_turns": 20, **config})
    first = env.reset(seed)
    return env, first


def test_guess_the_number_target_is_gems_draw_for_the_seed():
    env, first = game(seed=3)
    rng = random.Random(3)  # GEM: random.seed(seed), then randint for the target, randint for the example
    target, example = rng.randint(1, 20), rng.randint(1, 20)
    assert env.target == target
    assert "between 1 and 20" in first and "20 turns" in first and f"\\boxed{{{example}}}" in first
    assert env.reset_suffix() == "Give your next guess."


def test_guess_the_number_hand_played_win():
    env, _ = game(seed=3)
    target = env.target
    low = env.step("I think \\boxed{1}" if target != 1 else "\\boxed{2}")
    assert (low.reward, low.done, low.info["action_is_valid"]) == (0.0, False, True)
    assert ("higher than" if target != 1 else "lower than") in low.observation
    repeat = env.step("again \\boxed{1}" if target != 1 else "\\boxed{2}")
    assert (repeat.reward, repeat.done) == (0.0, False) and "guessed already" in repeat.observation
    outside = env.step("\\boxed{21}")
    assert (outside.reward, outside.done) == (0.0, False) and "outside 1..20" in outside.observation
    win = env.step(f"maybe \\boxed{{7}} no, \\boxed{{{target}}}")  # the last boxed number counts
    assert (win.reward, win.done, win.info["success"]) == (1.0, True, True)
    assert win.observation == f"Correct! The number was {target}; found in 4 turns."
    with pytest.raises(RuntimeError, match="finished episode"):
        env.step("\\boxed{1}")


def test_guess_the_number_no_number_ends_with_minus_point_one():
    env, _ = game()
    step = env.step("fifteen, \\boxed{x}")
    assert (step.reward, step.done, step.info["action_is_valid"], step.info["success"]) == (-0.1, True, False, False)
    assert step.info["suffix"] == "Give your next guess."


def test_guess_the_number_last_turn_scores_closeness():
    env = make_env(GUESS, {"min_number": 1, "max_number": 20, "max_turns": 2})
    seed = next(s for s in range(100) if (env.reset(s), env.target)[1] not in (5, 6))
    env.reset(seed)
    first = env.step("\\boxed{5}")
    assert (first.reward, first.done) == (0.0, False)
    last = env.step("\\boxed{6}")
    assert last.done and last.observation == "No turns left."
    assert last.reward == pytest.approx(1 - abs(6 - env.target) / 19)  # GEM: 1 - distance / (max - min)
    env.reset(seed)
    env.step("\\boxed{5}")
    assert env.step("\\boxed{99}").reward == 0.0  # out of range on the last turn: no closeness credit


@pytest.mark.parametrize(
    "config,message",
    [
        ({"max_number": 1}, "'max_number' (1) must be greater than 'min_number' (1)"),
        ({"max_turns": 0}, "'max_turns' must be an integer >= 1, got 0"),
        ({"min_number": "1"}, "'min_number' must be an integer >= 0"),
        ({"max_guesses": 3}, "unknown env_config key(s) ['max_guesses']; valid keys: ['max_number', 'max_turns'"),
    ],
)
def test_guess_the_number_env_config_errors(config, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make_env(GUESS, config)


def count_in(question: str) -> tuple[str, list[str], int]:
    """The letter, the words and the true count, read back from the question text."""
    text = question.split('"')[1]
    letter = question.split('"')[3]
    return letter, text.split(), text.lower().count(letter)


def test_letter_counting_question_and_scoring():
    env = make_env("rg:letter_counting", {"size": 500, "seed": 42})
    question = env.reset(seed=0)
    letter, words, count = count_in(question)
    assert question.startswith('In the text "') and question.endswith(
        f'how many times does the letter "{letter}" occur?'
    )
    assert 5 <= len(words) <= 15 and all(w in WORDS for w in words) and count >= 1
    step = env.step(f"Counting... \\boxed{{{count + 1}}} no wait, \\boxed{{{count}}}")
    assert (step.reward, step.done, step.info["success"], step.info["action_is_valid"]) == (1.0, True, True, True)
    env.reset(seed=0)
    partial = env.step(f"\\boxed{{{count} times}}")  # reasoning-gym: len(count) / len(answer)
    assert partial.reward == pytest.approx(len(str(count)) / len(f"{count} times")) and not partial.info["success"]
    env.reset(seed=0)
    missing = env.step(f"the answer is {count}")
    assert (missing.reward, missing.done, missing.info["action_is_valid"]) == (0.0, True, False)
    with pytest.raises(RuntimeError, match="finished episode"):
        env.step("\\boxed{1}")


def test_letter_counting_question_depends_on_seed_and_dataset_only():
    a, b = (make_env("rg:letter_counting", {"size": 500, "seed": 42}) for _ in range(2))
    assert [a.reset(seed=s) for s in range(20)] == [b.reset(seed=s) for s in reversed(range(20))][::-1]
    assert len({a.reset(seed=s) for s in range(20)}) > 10
    one = make_env("rg:letter_counting", {"size": 1, "seed": 7})  # a dataset of one question
    assert {one.reset(seed=s) for s in range(5)} == {one.question(0)[0]}
    assert make_env("rg:letter_counting", {"seed": 8}).reset(0) != make_env("rg:letter_counting", {"seed": 9}).reset(0)


@pytest.mark.parametrize(
    "config,message",
    [
        ({"size": 0}, "'size' must be an integer >= 1, got 0"),
        ({"seed": -1}, "'seed' must be an integer >= 0, got -1"),
        ({"name": "letter_counting"}, "unknown env_config key(s) ['name']; valid keys: ['seed', 'size']"),
    ],
)
def test_letter_counting_env_config_errors(config, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make_env("rg:letter_counting", config)


def test_step_concat_shows_gems_suffix_from_the_first_turn():
    """ROLL's StepConcatEnvManager puts reset's info['suffix'] after the first observation, and each step's after
    the next; the earlier observations form {history} (ROLL's gem_game_guess_the_number.yaml template)."""
    from roll.agentic.env_managers import ChatTokens, StepConcatEnvManager
    from roll.configs.agentic import EnvConfig
    from roll.demo.tiny_model import build_tokenizer

    env_config = {"min_number": 1, "max_number": 20, "max_turns": 20}
    first = make_env(GUESS, env_config).reset(seed=3)
    chat = ChatTokens(build_tokenizer([first, "\\boxed{1}", "Give your next guess."]))
    template = "Observation:\n{history}\n{current_observation}\nAnswer in \\boxed{{}}."
    config = EnvConfig(
        env_type=GUESS,
        env_config=env_config,
        env_manager="step_concat",
        max_turns=20,
        max_tokens_per_step=16,
        history_length=20,
        agent_template=template,
    )
    manager = StepConcatEnvManager(
        0, "GuessTheNumber", config, chat, 0.0, prompt_length=1024, response_length=16, gamma=1.0
    )
    manager.start(3, "g0", "t0")
    assert manager._render() == f"Observation:\n\n{first}\nGive your next guess.\nAnswer in \\boxed{{}}."
    reply = "\\boxed{21}"
    manager.request()
    manager.apply(chat.encode(reply) + [chat.eos_token_id], [-0.5] * (len(chat.encode(reply)) + 1))
    assert manager._render() == (
        f"Observation:\n{first}\nTurn 1: 21 is outside 1..20.\nGive your next guess.\nAnswer in \\boxed{{}}."
    )


def test_rolls_two_gem_examples_pass_in_the_recorded_table():
    """scripts/check_roll_examples.py --write-doc ran ROLL's own YAMLs unedited through --dry_run."""
    import json
    from pathlib import Path

    rows = json.loads((Path(__file__).parents[2] / "docs" / "roll_examples.json").read_text())["examples"]
    status = {row["path"]: row["status"] for row in rows}
    for name in ("gem_game_guess_the_number", "gem_rg_letter_counting"):
        assert status[f"examples/qwen3_agentic_gem/{name}.yaml"] == "pass"
