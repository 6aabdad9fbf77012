"""Dynamic sampling: a training batch of prompt groups that pass `rewards.<domain>.query_filter_config`.

Generation rounds: the step's `rollout_batch_size` prompts are generated and scored; groups the filter
drops (roll.algorithms.group_filter) are set aside. With `is_use_additional_prompts`, further prompts are
drawn from the sampler and generated in more rounds until `rollout_batch_size` groups pass, at most
`max_additional_running_prompts` extra prompts per step. The batch is always exactly `rollout_batch_size`
groups: surplus passing groups are discarded, and when the refill is off or its bound is spent the batch is
completed with dropped groups (logged; counted in dynamic_sampling/backfilled_groups).
"""

import math
from collections.abc import Callable

import numpy as np
import torch

from roll.algorithms.group_filter import keep_groups
from roll.distributed.data_proto import DataProto
from roll.pipeline.rlvr.reward_metrics import merge_worker_metrics
from roll.pipeline.rlvr.rollout.base import Rollout, RolloutBatch
from roll.utils.logging import get_logger
from roll.utils.progress import StepTimer

logger = get_logger("roll.pipeline")


def filter_enabled(config) -> bool:
    return any(reward.query_filter_config.type != "no_filter" for reward in config.rewards.values())


def group_keep_mask(batch: DataProto, group_size: int, filters: dict) -> tuple[torch.Tensor, np.ndarray]:
    """(keep [G], domain [G]) for a scored batch whose samples come in contiguous groups of `group_size`;
    `filters`: domain → its RewardFilterConfig."""
    scores = batch.batch["scores"].view(-1, group_size)
    domains = batch.non_tensor_batch["domain"][::group_size]
    keep = torch.ones(len(domains), dtype=torch.bool)
    for domain, spec in filters.items():
        groups = np.nonzero(domains == domain)[0]
        if len(groups):
            keep[groups] = keep_groups(scores[groups], spec.type, spec.filter_args)
    return keep, domains


class FilteredRollout(Rollout):
    """`generate(rows, step, generation_round=r)`: round r > 0 is a refill round with its own sampling seeds;
    `filters`: domain → its query_filter_config; `refill`, `max_refill_prompts`: is_use_additional_prompts,
    max_additional_running_prompts."""

    def __init__(
        self,
        sampler,
        generate: Callable[..., DataProto],
        compute_rewards: Callable[[DataProto], DataProto],
        batch_size: int,
        group_size: int,
        filters: dict,
        refill: bool,
        max_refill_prompts: int,
    ):
        super().__init__(sampler)
        self.generate, self.compute_rewards = generate, compute_rewards
        self.batch_size, self.group_size, self.filters = batch_size, group_size, filters
        self.refill, self.max_refill_prompts = refill, max_refill_prompts

    @classmethod
    def from_config(cls, config, sampler, generate, compute_rewards) -> "FilteredRollout":
        return cls(
            sampler,
            generate,
            compute_rewards,
            config.rollout_batch_size,
            config.num_return_sequences_in_group,
            {domain: reward.query_filter_config for domain, reward in config.rewards.items()},
            config.is_use_additional_prompts,
            config.max_additional_running_prompts,
        )

    def take(self, step: int, timer: StepTimer) -> RolloutBatch:
        with timer.phase("generate_and_reward"):
            return self._rounds(step)

    def _rounds(self, step: int) -> RolloutBatch:
        """Generation rounds until `batch_size` groups pass the domains' filters or the refill bound is spent;
        see the module docstring."""
        n, target = self.group_size, self.batch_size
        budget = self.max_refill_prompts if self.refill else 0
        counts = {domain: [0, 0] for domain in self.filters}  # kept, dropped
        rounds: list[tuple[DataProto, list[dict]]] = []
        kept, dropped = [], []  # (round, group)
        rows, extra = self.sampler.next_rows(target), 0
        while True:
            batch = self.compute_rewards(self.generate(rows, step, generation_round=len(rounds)))
            keep, domains = group_keep_mask(batch, n, self.filters)
            for group, (passed, domain) in enumerate(zip(keep.tolist(), domains)):
                (kept if passed else dropped).append((len(rounds), group))
                counts[domain][0 if passed else 1] += 1
            rounds.append((batch, rows))
            missing, left = target - len(kept), budget - extra
            if missing <= 0 or left <= 0:
                break
            # draw for the missing groups at the pass rate seen so far (at least 1/4), within the bound
            rate = max(len(kept) / (len(kept) + len(dropped)), 0.25)
            rows = self.sampler.next_rows(min(left, math.ceil(missing / rate)))
            extra += len(rows)
        backfill = max(target - len(kept), 0)
        if backfill:
            why = (
                f"the refill bound max_additional_running_prompts={budget} is spent"
                if self.refill
                else "is_use_additional_prompts is off"
            )
            logger.warning(
                "dynamic sampling, step %d: %d of %d groups passed the query filter after %d generation round(s) "
                "and %d extra prompts; %s, so %d dropped group(s) complete the batch",
                step + 1,
                len(kept),
                target,
                len(rounds),
                extra,
                why,
                backfill,
            )
        chosen = sorted(kept[:target] + dropped[:backfill])  # drawn order
        batch = DataProto.concat([rounds[r][0][list(range(g * n, (g + 1) * n))] for r, g in chosen])
        batch.non_tensor_batch["uid"] = np.array([f"{step}-{i // n}" for i in range(len(batch))], dtype=object)
        batch.meta_info["reward_metrics"] = merge_worker_metrics(*(scored for scored, _ in rounds))  # every graded
        metrics = {f"dynamic_sampling/{d}/groups_kept": c[0] for d, c in counts.items()}
        metrics.update({f"dynamic_sampling/{d}/groups_dropped": c[1] for d, c in counts.items()})
        metrics.update(
            {
                "dynamic_sampling/extra_prompts": extra,
                "dynamic_sampling/generation_rounds": len(rounds),
                "dynamic_sampling/backfilled_groups": backfill,
            }
        )
        return RolloutBatch(batch, [rounds[r][1][g] for r, g in chosen], metrics)
