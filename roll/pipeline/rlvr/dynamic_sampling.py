"""Dynamic sampling: a training batch of prompt groups that pass `rewards.<domain>.query_filter_config`.

Generation rounds: the step's `rollout_batch_size` prompts are generated and scored; groups the filter
drops (roll.algorithms.group_filter) are set aside. With `is_use_additional_prompts`, further prompts are
drawn from the sampler and generated in more rounds until `rollout_batch_size` groups pass, at most
`max_additional_running_prompts` extra prompts per step. The batch is always exactly `rollout_batch_size`
groups: surplus passing groups are discarded, and when the refill is off or its bound is spent the batch is
completed with dropped groups (logged; counted in dynamic_sampling/backfilled_groups).
"""

import math

import numpy as np
import torch

from roll.algorithms.group_filter import keep_groups
from roll.distributed.data_proto import DataProto
from roll.pipeline.rlvr.reward_metrics import merge_worker_metrics
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline")


def filter_enabled(config) -> bool:
    return any(reward.query_filter_config.type != "no_filter" for reward in config.rewards.values())


def group_keep_mask(batch: DataProto, group_size: int, rewards: dict) -> tuple[torch.Tensor, np.ndarray]:
    """(keep [G], domain [G]) for a scored batch whose samples come in contiguous groups of `group_size`."""
    scores = batch.batch["scores"].view(-1, group_size)
    domains = batch.non_tensor_batch["domain"][::group_size]
    keep = torch.ones(len(domains), dtype=torch.bool)
    for domain, reward in rewards.items():
        groups = np.nonzero(domains == domain)[0]
        if len(groups):
            spec = reward.query_filter_config
            keep[groups] = keep_groups(scores[groups], spec.type, spec.filter_args)
    return keep, domains


def sample_filtered_batch(pipeline, step: int) -> tuple[DataProto, list[dict], dict]:
    """(batch, its prompt rows, metrics): generation rounds until `rollout_batch_size` groups pass the
    domains' query filters or the refill bound is spent; see the module docstring."""
    config = pipeline.config
    n, target = config.num_return_sequences_in_group, config.rollout_batch_size
    budget = config.max_additional_running_prompts if config.is_use_additional_prompts else 0
    counts = {domain: [0, 0] for domain in config.rewards}  # kept, dropped
    rounds: list[tuple[DataProto, list[dict]]] = []
    kept, dropped = [], []  # (round, group)
    rows, extra = pipeline.sampler.next_rows(target), 0
    while True:
        batch = pipeline.compute_rewards(pipeline.generate(rows, step, generation_round=len(rounds)))
        keep, domains = group_keep_mask(batch, n, config.rewards)
        for group, (passed, domain) in enumerate(zip(keep.tolist(), domains)):
            (kept if passed else dropped).append((len(rounds), group))
            counts[domain][0 if passed else 1] += 1
        rounds.append((batch, rows))
        missing, left = target - len(kept), budget - extra
        if missing <= 0 or left <= 0:
            break
        # draw for the missing groups at the pass rate seen so far (at least 1/4), within the bound
        rate = max(len(kept) / (len(kept) + len(dropped)), 0.25)
        rows = pipeline.sampler.next_rows(min(left, math.ceil(missing / rate)))
        extra += len(rows)
    backfill = max(target - len(kept), 0)
    if backfill:
        why = (
            f"the refill bound max_additional_running_prompts={budget} is spent"
            if config.is_use_additional_prompts
            else "is_use_additional_prompts is off"
        )
        logger.warning(
            "dynamic sampling, step %d: %d of %d groups passed the query filter after %d generation round(s) and "
            "%d extra prompts; %s, so %d dropped group(s) complete the batch",
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
    batch.meta_info["reward_metrics"] = merge_worker_metrics(*(scored for scored, _ in rounds))  # every graded sample
    metrics = {f"dynamic_sampling/{d}/groups_kept": c[0] for d, c in counts.items()}
    metrics.update({f"dynamic_sampling/{d}/groups_dropped": c[1] for d, c in counts.items()})
    metrics.update(
        {
            "dynamic_sampling/extra_prompts": extra,
            "dynamic_sampling/generation_rounds": len(rounds),
            "dynamic_sampling/backfilled_groups": backfill,
        }
    )
    return batch, [rounds[r][1][g] for r, g in chosen], metrics
