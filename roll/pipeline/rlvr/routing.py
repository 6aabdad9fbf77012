"""Routing of samples to reward domains by their `tag`."""

import numpy as np


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
        example = domains[0] if len(domains) == 1 else "<domain>"
        raise ValueError(
            f"{where}: tag {tag!r} is in no rewards.<domain>.tag_included "
            f"(routed tags: {sorted(routes)}); add it to one domain's tag_included, e.g. "
            f"rewards.{example}.tag_included: [{tag}] (a domain takes only the tags it lists, as in ROLL; "
            f"only rows without a tag go to a lone domain)"
        )
    return routes[tag]


def check_data_routes(config):
    """Routes the tag of every row of the training and validation files (no tokenizer, no Ray), so
    `--dry_run` refuses a tag no domain takes, which the run would refuse only after loading the model.
    Files that do not exist are left to the start-up checks. Returns `config`; raises ConfigError."""
    from roll.configs.loader import ConfigError
    from roll.data.prompts import read_column

    routes = build_tag_routes(config.rewards)
    domains = list(config.rewards)
    blocks = [("actor_train.data_args", config.actor_train.data_args)]
    if config.validation is not None:
        blocks.append(("validation.data_args", config.validation.data_args))
    for key, data_args in blocks:
        names = [data_args.file_name] if isinstance(data_args.file_name, str) else list(data_args.file_name)
        for name in names:
            tags = read_column(name, data_args.tag_key)
            if tags is None:
                continue
            for index, tag in enumerate(tags):
                try:
                    route(tag, routes, domains, f"{key} {name} row {index}")
                except ValueError as error:
                    raise ConfigError(str(error)) from None
    return config
