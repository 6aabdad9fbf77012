"""Env managers: one per environment instance; they turn turns into training samples."""

from roll.agentic.env_managers.agent_native import AgentNativeEnvManager
from roll.agentic.env_managers.base import EnvManager, Episode, Turn
from roll.agentic.env_managers.chat import ChatTokens, TokenTrajectory
from roll.agentic.env_managers.proxy import ProxyEnvManager
from roll.agentic.env_managers.step import StepEnvManager
from roll.agentic.env_managers.step_concat import StepConcatEnvManager
from roll.agentic.env_managers.tir import TIREnvManager
from roll.agentic.env_managers.traj import TrajEnvManager

MANAGERS = {
    "traj": TrajEnvManager,
    "step": StepEnvManager,
    "step_concat": StepConcatEnvManager,
    "agent_native": AgentNativeEnvManager,
    "tir": TIREnvManager,
    "proxy": ProxyEnvManager,
}

__all__ = [
    "EnvManager",
    "Episode",
    "Turn",
    "ChatTokens",
    "TokenTrajectory",
    "TrajEnvManager",
    "StepEnvManager",
    "StepConcatEnvManager",
    "AgentNativeEnvManager",
    "TIREnvManager",
    "ProxyEnvManager",
    "MANAGERS",
]
