"""The agentic demo's model: a tiny Qwen2 that can read the shipped environments and reply in their
action format, but plays at random.

    prepare_agentic_demo("agentic_demo_data")   # → agentic_demo_data/model (config, weights, tokenizer)

The tokenizer is trained on the environments' own texts (instructions, renderings, actions), so every
map cell and action word is one token. Two supervised warm-start phases follow, both on random play:
1. the reply FORMAT (one action word, then end of turn) in both the multi-turn (trajectory) and the
   windowed (step) prompt layouts;
2. the environments' DYNAMICS: whole random episodes, where the trained tokens include every
   observation after the first, so the model learns how the board changes after a move. Without it
   the model cannot find the player and the box in a Sokoban board from RL rewards alone (measured in
   docs/agentic.md).
Every action in the data is drawn uniformly at random, so which action is good is left to RL: the
validation success rates start at the random-play level.
"""

import dataclasses
import json
import random
import time
from pathlib import Path

from roll.agentic.env_managers.step import render_step_prompt
from roll.agentic.envs import make_env
from roll.demo.tiny_model import build_tiny_model
from roll.demo.warm_start import warm_start

MARKER = "prepared.json"
FORMAT_VERSION = 2
ACTIONS = ["Left", "Down", "Right", "Up"]
# Renderings for the tokenizer corpus and random-play conversations: env_type → env_config.
ENVS = {"frozen_lake": {}, "sokoban": {}}
# Dynamics phase: shallow 5×5 Sokoban puzzles, so random episodes push the box often.
DYNAMICS_ENVS = {"sokoban": {"dim_room": [5, 5], "num_boxes": 1, "search_depth": 2, "max_steps": 10}, "frozen_lake": {}}


@dataclasses.dataclass(frozen=True)
class AgenticDemoSettings:
    seed: int = 0
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    episodes_per_env: int = 200  # random-play episodes per environment for the warm start
    max_turns: int = 10
    history_length: int = 2  # the step layout's window (custom_envs.<tag>.history_length)
    warm_start_steps: int = 80
    warm_start_batch_size: int = 16
    warm_start_lr: float = 3e-3
    dynamics_episodes: int = 2000  # random episodes per DYNAMICS_ENVS entry (FrozenLake: half)
    dynamics_max_turns: int = 6
    dynamics_steps: int = 1000  # phase 2 steps (batch size and lr as phase 1); ~3 min on 2 cores


def random_play(env_type: str, env_config: dict, seeds: range, max_turns: int, rng: random.Random) -> list[list]:
    """Episodes of uniformly random actions: [(observation, action), ...] each."""
    env, episodes = make_env(env_type, dict(env_config)), []
    for seed in seeds:
        observation, turns = env.reset(seed=seed), []
        for _ in range(max_turns):
            action = rng.choice(ACTIONS)
            turns.append((observation, action))
            result = env.step(action)
            if result.done:
                break
            observation = result.observation
        episodes.append(turns)
    instructions = env.instructions
    env.close()
    return [(instructions, turns) for turns in episodes]


def _user(instructions: str, text: str) -> str:
    return f"{instructions}\n{text}" if instructions else text


def trajectory_chat(instructions: str, turns: list) -> list[dict]:
    """One episode as one conversation: observation, action, next observation, ..."""
    chat = []
    for index, (observation, action) in enumerate(turns):
        chat.append({"role": "user", "content": _user(instructions, observation) if index == 0 else observation})
        chat.append({"role": "assistant", "content": action})
    return chat


def conversations(played: list, history_length: int) -> list[list[dict]]:
    """Trajectory layout (one conversation per episode) and step layout (one per turn, with the window)."""
    out = []
    for instructions, turns in played:
        for index, (observation, action) in enumerate(turns):
            window = turns[max(0, index - history_length) : index] if history_length else []
            out.append(
                [
                    {"role": "user", "content": _user(instructions, render_step_prompt(window, observation))},
                    {"role": "assistant", "content": action},
                ]
            )
        out.append(trajectory_chat(instructions, turns))
    return out


def dynamics_chats(settings: AgenticDemoSettings, rng: random.Random) -> list[list[dict]]:
    """Phase 2 data: random episodes of two or more turns as whole conversations. The warm start trains every
    token after the first prompt, so each observation is predicted from the board and the move before it."""
    played = []
    for env_type, env_config in DYNAMICS_ENVS.items():
        count = settings.dynamics_episodes // (2 if env_type == "frozen_lake" else 1)
        played += random_play(env_type, env_config, range(10_000, 10_000 + count), settings.dynamics_max_turns, rng)
    return [trajectory_chat(instructions, turns) for instructions, turns in played if len(turns) > 1]


def prepare_agentic_demo(
    output_dir, settings: AgenticDemoSettings = AgenticDemoSettings(), force: bool = False, log=print
) -> dict:
    out = Path(output_dir)
    marker = out / MARKER
    payload = {"format_version": FORMAT_VERSION, "settings": dataclasses.asdict(settings)}
    if not force and marker.is_file():
        stored = json.loads(marker.read_text())
        if all(stored.get(k) == v for k, v in payload.items()) and (out / "model" / "config.json").is_file():
            log(f"agentic demo already prepared in {out} (delete {marker} or pass --force to redo)")
            return dict(stored["summary"], skipped=True)
    started, rng = time.perf_counter(), random.Random(settings.seed)
    out.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)  # written last: a half-done preparation is redone
    played = [
        episode
        for env_type, env_config in ENVS.items()
        for episode in random_play(env_type, env_config, range(settings.episodes_per_env), settings.max_turns, rng)
    ]
    chats = conversations(played, settings.history_length)
    dynamics = dynamics_chats(settings, rng)
    corpus = sorted(
        {message["content"] for chat in chats + dynamics for message in chat}
        | set(ACTIONS)
        | {f"<answer>{a}</answer>" for a in ACTIONS}
        | {"Invalid action."}
    )
    model_dir = out / "model"
    build_tiny_model(
        str(model_dir),
        corpus,
        hidden_size=settings.hidden_size,
        num_layers=settings.num_layers,
        num_heads=settings.num_heads,
        seed=settings.seed,
        max_position_embeddings=1024,
    )
    train = dict(batch_size=settings.warm_start_batch_size, lr=settings.warm_start_lr)
    log(f"warm start 1/2 (format): {settings.warm_start_steps} steps on {len(chats)} conversations")
    losses = warm_start(str(model_dir), chats, steps=settings.warm_start_steps, seed=settings.seed, log=log, **train)
    log(f"warm start 2/2 (dynamics): {settings.dynamics_steps} steps on {len(dynamics)} episodes")
    dynamics_losses = warm_start(
        str(model_dir), dynamics, steps=settings.dynamics_steps, seed=settings.seed + 1, log=log, **train
    )
    summary = {
        "conversations": len(chats),
        "warm_start_loss_first": losses[0],
        "warm_start_loss_last": sum(losses[-10:]) / len(losses[-10:]),
        "dynamics_episodes": len(dynamics),
        "dynamics_loss_first": dynamics_losses[0],
        "dynamics_loss_last": sum(dynamics_losses[-10:]) / len(dynamics_losses[-10:]),
        "seconds": round(time.perf_counter() - started, 1),
    }
    marker.write_text(json.dumps(dict(payload, summary=summary), indent=1))
    return dict(summary, skipped=False)
