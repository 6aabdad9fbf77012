"""Reward plugins of the broken-inputs corpus that fail as a user's plugin might: in __init__, in initialize()."""

from roll.workers.rewards import RewardWorker


class InitRaises(RewardWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        raise RuntimeError("cannot open the grading database")

    def score(self, batch) -> list[float]:
        return [0.0] * len(batch)


class InitializeRaises(RewardWorker):
    def initialize(self, total_steps: int = 0) -> None:
        raise FileNotFoundError("answers.db")

    def score(self, batch) -> list[float]:
        return [0.0] * len(batch)
