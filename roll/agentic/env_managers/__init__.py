"""Env managers: one per environment instance; they turn turns into training samples."""

from roll.agentic.env_managers.base import EnvManager, Episode, Turn
from roll.agentic.env_managers.chat import ChatTokens, TokenTrajectory
from roll.agentic.env_managers.step import StepEnvManager
from roll.agentic.env_managers.traj import TrajEnvManager

MANAGERS = {"traj": TrajEnvManager, "step": StepEnvManager}

__all__ = [
    "EnvManager",
    "Episode",
    "Turn",
    "ChatTokens",
    "TokenTrajectory",
    "TrajEnvManager",
    "StepEnvManager",
    "MANAGERS",
]
