"""A user's own environment, loaded in tests by its dotted path (tests.agentic.user_env_module.CountdownEnv)."""

from roll.agentic.envs import BaseEnv, EnvStep


class CountdownEnv(BaseEnv):
    """Say 'go' once the counter shown reaches zero."""

    instructions = "Reply 'wait' until the number is 0, then reply 'go'."
    action_pattern = r"^(wait|go)$"
    default_config = {"start": 2}

    def reset(self, seed: int) -> str:
        self.count = self.config["start"] + seed % 2
        return str(self.count)

    def step(self, action: str) -> EnvStep:
        if action not in ("wait", "go"):
            return EnvStep(str(self.count), 0.0, False, {"action_is_valid": False, "success": False})
        if action == "go":
            success = self.count == 0
            return EnvStep("done", float(success), True, {"action_is_valid": True, "success": success})
        self.count = max(self.count - 1, 0)
        return EnvStep(str(self.count), 0.0, False, {"action_is_valid": True, "success": False})


class NotAnEnv:
    pass


class HintEnv(BaseEnv):
    """A GEM-style game: each observation reports the last guess, and info["suffix"] asks for the next one."""

    default_config = {"target": 3}

    def reset(self, seed: int) -> str:
        self.turn = 0
        return "Guess a number from 1 to 4."

    def step(self, action: str) -> EnvStep:
        self.turn += 1
        hit = action.strip() == str(self.config["target"])
        info = {"action_is_valid": True, "success": hit, "suffix": f"Guess {self.turn + 1}?"}
        return EnvStep(f"Turn {self.turn}: you said {action.strip()}.", float(hit), hit, info)
