"""ROLL's path for the code reward: roll.workers.rewards.code_sandbox.CodeSandboxRewardWorker."""

from roll.workers.rewards.code_sandbox import CodeSandboxRewardWorker

__all__ = ["CodeSandboxRewardWorker"]
