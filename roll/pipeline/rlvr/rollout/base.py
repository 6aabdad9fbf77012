"""The one interface of RLVR's rollout modes, and the off-policy schedule two of them share.

A `Rollout` hands the pipeline each step's scored samples and is told about the moments around a weight
sync; the pipeline never asks which mode it holds. The modes (`roll.pipeline.rlvr.rollout.build_rollout`
picks one from the config): plain, filtered (dynamic sampling), async batch-level, request-level.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from roll.distributed.data_proto import DataProto
from roll.utils.progress import StepTimer


@dataclass
class RolloutBatch:
    """One step's rollout: the samples, their prompt rows, the mode's metrics and histograms. `scoring`: None
    when the batch is scored; else what scores it, `scoring(batch)` → the batch with its scores (the pipeline
    runs it alongside the forward passes, which need only the generated tokens)."""

    batch: DataProto
    rows: list[dict]
    metrics: dict = field(default_factory=dict)
    histograms: dict[str, np.ndarray] = field(default_factory=dict)  # name → values (e.g. async/lag per sample)
    scoring: Callable[[DataProto], DataProto] | None = None


class Rollout:
    """What the pipeline asks of every mode. The defaults are the synchronous modes' (nothing runs between
    steps): a subclass implements `take` and overrides the hooks it needs."""

    def __init__(self, sampler):
        self.sampler = sampler  # the training prompts' sampler (roll.data.prompts): next_rows, state_dict

    def take(self, step: int, timer: StepTimer) -> RolloutBatch:
        """Step `step`'s batch, scored or with its `scoring` to run; the mode's phases are timed on `timer`
        (timing/<phase>)."""
        raise NotImplementedError

    def runs_between_steps(self) -> bool:
        """Whether generation and scoring go on while the pipeline's other phases run (the async modes)."""
        return False

    def start(self, first_step: int) -> None:
        """A (re)start of training at `first_step`: nothing is in flight, the engine serves version first_step."""

    def before_weight_sync(self, timer: StepTimer) -> None:
        """The last moment the engine serves the weights it has."""

    def after_weight_sync(self) -> None:
        """The engine now serves the weights of the step just trained."""

    def state_dict(self) -> dict:
        """The sampler position a checkpoint stores: where a resumed run draws its next step's prompts."""
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)

    def close(self) -> None:
        """Stop what the mode runs in the background (threads); the pipeline stops the roles."""


@dataclass(frozen=True)
class OffPolicy:
    """The schedule of the async modes (docs/async.md): generation runs up to `ahead` steps in front of
    training; samples whose policy lag exceeds `max_lag` are never trained on but regenerated or dropped
    (`stale`), counted."""

    ahead: int  # async_generation_ratio
    max_lag: int  # async_max_lag (default: ahead)
    stale: str  # async_stale_samples: "regenerate" (the same prompts) or "drop" (new prompts)
    last_step: int  # max_steps - 1: nothing is generated for steps after it

    @classmethod
    def from_config(cls, config) -> "OffPolicy":
        ahead = int(config.async_generation_ratio)
        max_lag = ahead if config.async_max_lag is None else config.async_max_lag
        return cls(ahead, max_lag, config.async_stale_samples, config.max_steps - 1)


def stale_action(lag: int, max_lag: int, policy: str) -> str | None:
    """None if a batch with this lag may be trained on, else what to do with it ("regenerate" or "drop")."""
    return None if lag <= max_lag else policy
