"""Test doubles that fail on purpose, importable by Ray workers (the worktree root is on their PYTHONPATH).

`FaultyRewardWorker` grades like the math rule and, on its `at_call`-th compute_rewards call, does
`fault`: "nan" (a NaN score), "count" (one score too few), "hang" (sleeps an hour), "raise".
With `marker` set the fault happens once across processes: the first worker to reach it creates the file.
`ResetFailsEnv` is an environment whose reset raises after `env_config.fail_after` resets.
"""

import math
import os
import time

from roll.agentic.envs import BaseEnv, EnvStep
from roll.utils.math_grader import grade as grade_math
from roll.workers.rewards import RewardWorker


class FaultyRewardWorker(RewardWorker):
    calls = 0

    def score(self, batch) -> list[float]:
        args = self.worker_config.reward_args
        self.calls += 1
        scores = self.grade_rows(batch, grade_math)
        if self.calls != args["at_call"]:
            return scores
        marker = args.get("marker")
        if marker:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return scores  # already failed once
        fault = args["fault"]
        if fault == "nan":
            scores[3] = math.nan
        elif fault == "count":
            scores = scores[:-1]
        elif fault == "hang":
            time.sleep(3600)
        elif fault == "raise":
            raise RuntimeError("the reward service is down")
        return scores


class ResetFailsEnv(BaseEnv):
    """A one-turn env whose reset raises from the `fail_after`-th reset in this process on."""

    instructions = "Reply 'go'."
    action_pattern = r"^(go)$"
    default_config = {"fail_after": 1_000_000}
    resets = 0

    def reset(self, seed: int) -> str:
        type(self).resets += 1
        if type(self).resets > self.config["fail_after"]:
            raise ConnectionError("the game server refused the connection")
        return "ready"

    def step(self, action: str) -> EnvStep:
        return EnvStep("done", 1.0, True, {"action_is_valid": True, "success": True})
