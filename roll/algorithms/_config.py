"""Reading options from the config objects users pass (verl dataclasses, OmegaConf, dicts, None)."""

__all__ = []


def config_get(config, key: str, default):
    """`config[key]` for mappings, `config.key` otherwise; missing, None-valued or config=None → default.

    verl asserts a config is given; roll falls back to the documented defaults instead (docs/algorithms.md §2, §8).
    A non-struct OmegaConf DictConfig returns None for a missing attribute, hence the None check.
    """
    if config is None:
        return default
    getter = getattr(config, "get", None)
    if callable(getter):
        value = getter(key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None else value
