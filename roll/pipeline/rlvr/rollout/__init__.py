"""RLVR's rollout: how a step gets its scored samples. One interface (`Rollout`, base.py), one class per mode,
each given the callables and settings it uses, never the pipeline; `build_rollout` picks the mode once from
the config:

    generate_opt_level: 1                      RequestRollout     (requests.py)    requests stream to the engine,
                                                                                   groups are scored as they finish
    async_generation_ratio: k > 0              AsyncBatchRollout  (async_batch.py) batches generated k steps ahead
    a rewards.<domain>.query_filter_config     FilteredRollout    (filtered.py)    dynamic sampling
    otherwise                                  PlainRollout       (plain.py)       generate, then score

and rollout_mock around the chosen one: dump (RecordedRollout) or replay instead of it (ReplayRollout).
"""

from collections.abc import Callable
from dataclasses import dataclass

from roll.distributed.data_proto import DataProto
from roll.pipeline.rlvr.rollout.async_batch import AsyncBatchRollout
from roll.pipeline.rlvr.rollout.base import Rollout, RolloutBatch
from roll.pipeline.rlvr.rollout.filtered import FilteredRollout, filter_enabled
from roll.pipeline.rlvr.rollout.plain import PlainRollout
from roll.pipeline.rlvr.rollout.recorded import RecordedRollout, ReplayRollout
from roll.pipeline.rlvr.rollout.requests import RequestRollout

__all__ = ["Rollout", "RolloutBatch", "RolloutParts", "build_rollout"]


@dataclass(frozen=True)
class RolloutParts:
    """What the modes are built from; each mode takes the few it uses."""

    sampler: object  # the training prompts' sampler (roll.data.prompts.prompt_sampler)
    generate: Callable[..., DataProto]  # (rows, step, generation_round=0) → the decoded groups
    compute_rewards: Callable[[DataProto], DataProto]  # scores (and grading status) of a generated batch
    submit_generation: Callable[[list[dict], int], tuple[object, int]]  # (rows, step) → (pending call, padding)
    finish_generation: Callable[[DataProto, int, int], DataProto]  # (engine output, padding, group size) → decoded
    engine: Callable[[], object]  # → the actor_infer Cluster of the moment (recoveries replace it)
    use_engine: Callable[[], None]  # the engine's turn on devices it shares (roll.pipeline.core.colocation)
    pad_token_id: int


def build_rollout(config, parts: RolloutParts, store=None) -> Rollout:
    """The rollout of `config`'s mode (the table above; the config checks refuse the combinations none serves),
    recorded or replayed by `store` (roll.pipeline.core.rollout_dump.RolloutStore) when rollout_mock is on."""
    if store is not None and store.replaying:
        return ReplayRollout(parts.sampler, store)
    rollout = _mode(config, parts)
    return RecordedRollout(rollout, store) if store is not None and store.config is not None else rollout


def _mode(config, parts: RolloutParts) -> Rollout:
    if config.generate_opt_level == 1:
        return RequestRollout.from_config(
            config,
            parts.sampler,
            parts.engine,
            parts.use_engine,
            parts.finish_generation,
            parts.compute_rewards,
            parts.pad_token_id,
        )
    if config.async_generation_ratio > 0:
        return AsyncBatchRollout.from_config(
            config, parts.sampler, parts.submit_generation, parts.finish_generation, parts.compute_rewards
        )
    if filter_enabled(config):
        return FilteredRollout.from_config(config, parts.sampler, parts.generate, parts.compute_rewards)
    return PlainRollout.from_config(config, parts.sampler, parts.generate, parts.compute_rewards)
