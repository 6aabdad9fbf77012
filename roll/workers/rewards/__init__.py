from roll.workers.rewards.base import RewardWorker

__all__ = ["RewardWorker"]
