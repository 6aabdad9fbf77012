"""Guess the Number under GEM's id `game:GuessTheNumber-v0` (ROLL's examples/qwen3_agentic_gem): the rules, rewards
and termination of GEM 0.0.4's game, in roll's own words (differences from GEM's text: docs/roll_compatibility.md).

A turn's guess is the last \\boxed{<digits>} of the reply. A reply without one ends the episode with -0.1; a guess
outside the range or one made before scores 0 and the game goes on; the target scores 1 and ends it; any other
guess gets a "higher"/"lower" hint. On the last turn an in-range guess scores 1 - |guess - target| / (max - min).
"""

import random
import re

from roll.agentic.envs.base import BaseEnv, EnvStep, EpisodeCounter, check_positive_int
from roll.agentic.envs.registry import register_env

GUESS = re.compile(r"\\boxed\{(\d+)\}")
NO_GUESS_REWARD = -0.1  # GEM's format-error reward: the reply named no number
SUFFIX = "Give your next guess."  # GEM's info["suffix"], shown after each observation by step_concat


@register_env("game:GuessTheNumber-v0")
class GuessTheNumberEnv(BaseEnv):
    # GEM's registration of game:GuessTheNumber-v0; ROLL's example passes all three
    default_config = {"min_number": 1, "max_number": 20, "max_turns": 10}

    def __init__(self, **env_config):
        super().__init__(**env_config)
        self.low = check_positive_int(self, "min_number", minimum=0)
        self.high = check_positive_int(self, "max_number", minimum=0)
        if self.high <= self.low:
            raise ValueError(
                f"game:GuessTheNumber-v0: env_config 'max_number' ({self.high}) must be greater than 'min_number' "
                f"({self.low}); the last turn's reward divides by their difference"
            )
        self.counter = EpisodeCounter(check_positive_int(self, "max_turns"))
        self.target = None
        self.guessed: set[int] = set()

    def reset(self, seed: int) -> str:
        # one generator per episode, drawn in GEM's order (target, then the example guess), so a seed picks the
        # same target as GEM's random.seed(seed) does
        rng = random.Random(seed)
        self.target = rng.randint(self.low, self.high)
        example = rng.randint(self.low, self.high)
        self.guessed = set()
        self.counter.reset()
        return (
            "Game: Guess The Number.\n"
            f"A secret whole number lies between {self.low} and {self.high}, both included; you have "
            f"{self.counter.max_steps} turns to find it.\n"
            "After each guess you are told whether the secret number is higher or lower than it.\n"
            "Write whatever you like; only the number inside \\boxed{} counts as your guess, "
            f"e.g. \\boxed{{{example}}}.\n"
            "Your earlier guesses are listed below as the game goes on; use them to win before the turns run out.\n"
            "Make your first guess.\n"
        )

    def reset_suffix(self) -> str:
        return SUFFIX

    def step(self, action: str) -> EnvStep:
        self.counter.tick("game:GuessTheNumber-v0")
        turn = self.counter.steps
        matches = GUESS.findall(action)
        if not matches:
            self.counter.finish(True)
            return self._result(f"Turn {turn}: no guess found (put a number in \\boxed{{}}).", NO_GUESS_REWARD, False)
        guess = int(matches[-1])
        in_range = self.low <= guess <= self.high
        if not in_range:
            observation = f"Turn {turn}: {guess} is outside {self.low}..{self.high}."
        elif guess in self.guessed:
            observation = f"Turn {turn}: {guess} was guessed already."
        elif guess == self.target:
            self.counter.finish(True)
            return self._result(f"Correct! The number was {self.target}; found in {turn} turns.", 1.0, True, True)
        else:
            self.guessed.add(guess)
            direction = "higher" if guess < self.target else "lower"
            observation = f"Turn {turn}: you guessed {guess}; the secret number is {direction} than {guess}."
        if self.counter.finish(False):  # out of turns: partial credit for closeness (GEM's rule)
            reward = 1.0 - abs(guess - self.target) / (self.high - self.low) if in_range else 0.0
            return self._result("No turns left.", reward, True)
        return self._result(observation, 0.0, True)

    def _result(self, observation: str, reward: float, valid: bool, success: bool = False) -> EnvStep:
        info = {"action_is_valid": valid, "success": success, "suffix": SUFFIX}
        return EnvStep(observation, reward, self.counter.done, info)
