"""Routing of samples to reward domains by their `tag`, and scores → token-level scores."""

import numpy as np
import torch

from roll.distributed.data_proto import DataProto


def build_tag_routes(rewards: dict) -> dict:
    """tag → domain, from each `rewards.<domain>.tag_included`; a tag claimed twice is an error."""
    routes = {}
    for domain, reward_config in rewards.items():
        for tag in reward_config.tag_included:
            if tag in routes:
                raise ValueError(
                    f"rewards.{domain}.tag_included: tag {tag!r} is already routed to "
                    f"rewards.{routes[tag]}; each tag must belong to one domain"
                )
            routes[tag] = domain
    return routes


def route(tag, routes: dict, domains: list[str], where: str) -> str:
    """The domain for one row; untagged rows go to the only domain when there is exactly one."""
    if tag is None or (isinstance(tag, float) and np.isnan(tag)):
        if len(domains) == 1:
            return domains[0]
        raise ValueError(
            f"{where}: the row has no tag and there are several reward domains {domains}; "
            f"add a 'tag' column or keep one domain"
        )
    if tag not in routes:
        raise ValueError(
            f"{where}: tag {tag!r} is in no rewards.<domain>.tag_included "
            f"(routed tags: {sorted(routes)}); add it to one domain's tag_included"
        )
    return routes[tag]


def scores_to_token_level(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Place each sample's score on its last response token (rewards are zero elsewhere)."""
    token_scores = torch.zeros_like(response_mask, dtype=torch.float32)
    last = (response_mask.sum(dim=-1).long() - 1).clamp(min=0)
    token_scores[torch.arange(len(scores)), last] = scores.float()
    return token_scores


def pad_to_multiple(batch: DataProto, multiple: int) -> tuple[DataProto, int]:
    """Repeat leading rows so `len` divides `multiple` (workers split rows evenly); returns the pad count."""
    pad = (-len(batch)) % multiple
    if pad == 0:
        return batch, 0
    return DataProto.concat([batch, batch[[i % len(batch) for i in range(pad)]]]), pad
