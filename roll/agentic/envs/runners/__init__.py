"""Agent runners: programs that play episodes through roll's OpenAI-compatible endpoint (env_manager: proxy)."""

from roll.agentic.envs.runners.base import AgentFailed, AgentRunner, EpisodeResult, as_result, resolve_runner_class
from roll.agentic.envs.runners.env_runner import EnvRunner
from roll.agentic.envs.runners.program import ProgramRunner

__all__ = [
    "AgentFailed",
    "AgentRunner",
    "EpisodeResult",
    "EnvRunner",
    "ProgramRunner",
    "as_result",
    "resolve_runner_class",
]
