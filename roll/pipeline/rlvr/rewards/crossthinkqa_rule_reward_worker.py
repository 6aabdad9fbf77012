"""ROLL's dotted path for roll.workers.rewards.crossthinkqa_rule.CrossThinkQARuleRewardWorker."""

from roll.workers.rewards.crossthinkqa_rule import CrossThinkQARuleRewardWorker

__all__ = ["CrossThinkQARuleRewardWorker"]
