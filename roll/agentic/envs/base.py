"""The environment interface: text in (the model's reply), text out (the next observation)."""

import abc
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class EnvStep:
    observation: str  # text shown to the model next (new state rendering, or a tool's output)
    reward: float  # this step's env reward; the env manager adds any format penalty
    done: bool  # episode over: success, failure, or max_steps reached
    info: dict[str, Any] = field(default_factory=dict)  # always has "action_is_valid" and "success"


class BaseEnv(abc.ABC):
    """One environment instance; text in, text out. Not thread-safe: one env manager owns one instance.

    Subclasses list their env_config keys with defaults in `default_config`; `BaseEnv.__init__` rejects
    unknown keys and leaves the merged values in `self.config`.
    """

    instructions: str = ""  # task description shown once, before the first observation
    action_pattern: str = ""  # the regex the action text must match (documentation for users)
    default_config: ClassVar[dict[str, Any]] = {}
    # False where reset() reads what only the environment workers should fetch (a dataset download): the
    # driver and --dry_run then do not reset it to measure the first prompt; its env manager checks that
    reset_in_driver: ClassVar[bool] = True

    def __init__(self, **env_config):
        unknown = sorted(set(env_config) - set(self.default_config))
        if unknown:
            raise ValueError(
                f"{type(self).__name__}: unknown env_config key(s) {unknown}; valid keys: {sorted(self.default_config)}"
            )
        self.config = {**self.default_config, **env_config}

    @abc.abstractmethod
    def reset(self, seed: int) -> str:
        """Start a new episode, deterministic for `seed`; return the first observation."""

    def reset_suffix(self) -> str:
        """The prompt for the first move that step_concat shows after the first observation (GEM's reset
        info["suffix"]); later ones come from each step's info["suffix"]."""
        return ""

    @abc.abstractmethod
    def step(self, action: str) -> EnvStep:
        """Apply the model's decoded reply text for this turn."""

    def close(self) -> None:  # noqa: B027 - optional hook: most envs hold nothing to release
        pass

    def least_observation_tokens(self) -> int:
        """A lower bound on the tokens of any observation, known without reset (a board's cells, one token each
        at least): the config check compares it with prompt_length before a reset builds a board too large to
        show (a 100000 × 100000 FrozenLake map asked numpy for 74.5 GiB). 0 = no bound known."""
        return 0


def check_positive_int(env: BaseEnv, key: str, minimum: int = 1) -> int:
    value = env.config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{type(env).__name__}: env_config {key!r} must be an integer >= {minimum}, got {value!r}")
    return value


def choice_pattern(choices: Sequence[str]) -> str:
    """The reply is one of `choices`, bare or as <answer>choice</answer>; case-insensitive, whitespace around."""
    words = "|".join(re.escape(c) for c in choices)
    return rf"^\s*(?:<answer>\s*({words})\s*</answer>|({words}))\s*$"


def parse_choice(text: str, choices: Sequence[str]) -> str | None:
    """The canonical spelling of the chosen word, or None when the reply does not match."""
    match = re.match(choice_pattern(choices), text, flags=re.IGNORECASE)
    if match is None:
        return None
    word = (match.group(1) or match.group(2)).lower()
    return next(c for c in choices if c.lower() == word)


class EpisodeCounter:
    """Step bookkeeping shared by the shipped envs: max_steps ends the episode, stepping after done is an error."""

    def __init__(self, max_steps: int):
        self.max_steps = max_steps
        self.steps = 0
        self.done = True  # until the first reset

    def reset(self) -> None:
        self.steps, self.done = 0, False

    def tick(self, env_name: str) -> None:
        if self.done:
            raise RuntimeError(f"{env_name}: step() called on a finished episode; call reset(seed) first")
        self.steps += 1

    def finish(self, done: bool) -> bool:
        """Returns the final done flag: the env's own termination, or max_steps reached."""
        self.done = done or self.steps >= self.max_steps
        return self.done
