"""A user-defined environment: a corridor to walk along. roll is not modified to use it; the config names
the class by dotted path (`env_type: my_envs.CorridorEnv`)."""

import random

from roll.agentic.envs import BaseEnv, EnvStep
from roll.agentic.envs.base import choice_pattern, parse_choice

ACTIONS = ["Left", "Right"]


class CorridorEnv(BaseEnv):
    instructions = "Walk to the goal G. Reply with one action: Left or Right."
    action_pattern = choice_pattern(ACTIONS)
    default_config = {"length": 5, "max_steps": 6}  # the keys env_config may set, with their defaults

    def reset(self, seed: int) -> str:
        rng = random.Random(seed)
        length = self.config["length"]
        self.goal = rng.choice([0, length - 1])
        self.position = rng.randrange(1, length - 1)
        self.steps = 0
        return self.render()

    def render(self) -> str:
        cells = ["_"] * self.config["length"]
        cells[self.goal], cells[self.position] = "G", "P"
        return " ".join(cells)

    def step(self, action: str) -> EnvStep:
        self.steps += 1
        move = parse_choice(action, ACTIONS)
        if move is not None:
            self.position += -1 if move == "Left" else 1
            self.position = min(max(self.position, 0), self.config["length"] - 1)
        success = self.position == self.goal
        done = success or self.steps >= self.config["max_steps"]
        observation = self.render() if move is not None else "Invalid action.\n" + self.render()
        return EnvStep(observation, float(success), done, {"action_is_valid": move is not None, "success": success})
