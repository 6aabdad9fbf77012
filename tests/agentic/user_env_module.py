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
