"""FrozenLake on gymnasium's own dynamics, rendered as a space-separated text grid."""

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from roll.agentic.envs.base import BaseEnv, EnvStep, EpisodeCounter, check_positive_int, choice_pattern, parse_choice
from roll.agentic.envs.registry import register_env

ACTIONS = ("Left", "Down", "Right", "Up")  # gymnasium's action ids 0..3, in this order
# Single ASCII symbols so that every cell is one token for small tokenizers.
CELL = {"S": "_", "F": "_", "H": "O", "G": "G"}
PLAYER = {"S": "P", "F": "P", "H": "X", "G": "W"}


@register_env("frozen_lake")
class FrozenLakeEnv(BaseEnv):
    instructions = (
        "You are walking on a frozen lake. Reach the goal G without falling into a hole O.\n"
        "Legend: P you, _ frozen ice, O hole, G goal, X you fell into a hole, W you reached the goal.\n"
        "Reply with one action: Left, Down, Right or Up (for example <answer>Right</answer>)."
    )
    action_pattern = choice_pattern(ACTIONS)
    default_config = {"size": 4, "p": 0.8, "is_slippery": False, "max_steps": 10, "map_seed_offset": 0}

    def __init__(self, **env_config):
        super().__init__(**env_config)
        self.size = check_positive_int(self, "size", minimum=2)
        self.max_steps = check_positive_int(self, "max_steps")
        self.p = self.config["p"]
        if not isinstance(self.p, (int, float)) or not 0.0 < self.p <= 1.0:
            raise ValueError(f"frozen_lake: env_config 'p' (frozen-cell probability) must be in (0, 1], got {self.p!r}")
        if not isinstance(self.config["is_slippery"], bool):
            raise ValueError(
                f"frozen_lake: env_config 'is_slippery' must be true or false, got {self.config['is_slippery']!r}"
            )
        if not isinstance(self.config["map_seed_offset"], int):
            raise ValueError(
                f"frozen_lake: env_config 'map_seed_offset' must be an integer, got {self.config['map_seed_offset']!r}"
            )
        self.counter = EpisodeCounter(self.max_steps)
        self.gym_env = None
        self.desc = None

    def least_observation_tokens(self) -> int:
        return self.size * self.size  # every cell is one symbol (CELL, PLAYER)

    def reset(self, seed: int) -> str:
        # The map depends only on the seed, so a group of rollouts with one seed sees one map.
        self.desc = generate_random_map(size=self.size, p=self.p, seed=seed + self.config["map_seed_offset"])
        if self.gym_env is not None:
            self.gym_env.close()
        self.gym_env = GymFrozenLake(desc=self.desc, is_slippery=self.config["is_slippery"])
        self.state, _ = self.gym_env.reset(seed=seed)  # seeds the slip RNG too
        self.counter.reset()
        return self.render()

    def render(self) -> str:
        rows = []
        for r, line in enumerate(self.desc):
            cells = [PLAYER[ch] if r * self.size + c == self.state else CELL[ch] for c, ch in enumerate(line)]
            rows.append(" ".join(cells))
        return "\n".join(rows)

    def step(self, action: str) -> EnvStep:
        self.counter.tick("frozen_lake")
        choice = parse_choice(action, ACTIONS)
        if choice is None:
            done = self.counter.finish(False)
            return EnvStep(
                "Invalid action.\n" + self.render(),
                0.0,
                done,
                {"action_is_valid": False, "success": False, "steps": self.counter.steps},
            )
        self.state, reward, terminated, _, _ = self.gym_env.step(ACTIONS.index(choice))
        success = reward > 0
        done = self.counter.finish(bool(terminated))
        return EnvStep(
            self.render(),
            float(reward),
            done,
            {"action_is_valid": True, "success": success, "steps": self.counter.steps},
        )

    def close(self) -> None:
        if self.gym_env is not None:
            self.gym_env.close()
            self.gym_env = None
