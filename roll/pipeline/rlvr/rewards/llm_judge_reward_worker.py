"""ROLL's dotted path for roll.workers.rewards.llm_judge.LLMJudgeRewardWorker."""

from roll.workers.rewards.llm_judge import LLMJudgeRewardWorker

__all__ = ["LLMJudgeRewardWorker"]
