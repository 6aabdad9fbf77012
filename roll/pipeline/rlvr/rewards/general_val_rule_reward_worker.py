"""General-value rule reward (ROLL path): the IFEval rule worker, roll.workers.rewards.ifeval_rule."""

from roll.workers.rewards.ifeval_rule import GeneralRuleRewardWorker

GeneralValRuleRewardWorker = GeneralRuleRewardWorker

__all__ = ["GeneralValRuleRewardWorker"]
