"""Routing of samples to reward domains by their `tag`."""

import numpy as np

from roll.utils.errors import InputError


def build_tag_routes(rewards: dict) -> dict:
    """tag → domain, from each `rewards.<domain>.tag_included`; a tag claimed twice is an error."""
    routes = {}
    for domain, reward_config in rewards.items():
        for tag in reward_config.tag_included:
            if tag in routes:
                raise InputError(
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
        raise InputError(
            f"{where}: the row has no tag and there are several reward domains {domains}; "
            f"add a 'tag' column or keep one domain"
        )
    if tag not in routes:
        raise InputError(
            f"{where}: tag {tag!r} is in no rewards.<domain>.tag_included "
            f"(routed tags: {sorted(routes)}); add it to one domain's tag_included"
        )
    return routes[tag]
