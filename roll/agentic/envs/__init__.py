"""Environments for agentic RL and their registry; importing this registers the shipped envs."""

from roll.agentic.envs import (  # noqa: F401  (registration)
    arithmetic,
    calculator,
    dataset_questions,
    frozen_lake,
    guess_the_number,
    letter_counting,
    sokoban,
    sokoban_native,
)
from roll.agentic.envs.base import BaseEnv, EnvStep
from roll.agentic.envs.registry import list_envs, make_env, register_env

__all__ = ["BaseEnv", "EnvStep", "register_env", "make_env", "list_envs"]
