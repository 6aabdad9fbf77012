"""ROLL's dotted path for roll.workers.rewards.ifeval_rule.GeneralRuleRewardWorker."""

from roll.workers.rewards.ifeval_rule import GeneralRuleRewardWorker

__all__ = ["GeneralRuleRewardWorker"]
