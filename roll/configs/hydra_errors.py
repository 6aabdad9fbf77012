"""Hydra's composition errors in the user's words.

compose_config turns every plain `key=value` override into Hydra's `++key=value` (set or add), so Hydra's
"Error merging override ++rewards=[math]" names an override the user never wrote and not what went wrong (its
cause, "Cannot merge DictConfig with ListConfig", is one level down). Here: the key, what it holds in the YAML
(a mapping or a list), what the override gave, and the override as the user wrote it.
"""

import re

_MERGE = re.compile(r"Cannot merge (DictConfig|ListConfig) with (DictConfig|ListConfig)")
_FULL_KEY = re.compile(r"full_key:\s*(\S+)")
_WHAT = {"DictConfig": "a mapping", "ListConfig": "a list"}
_EXAMPLE = {
    "DictConfig": "set its keys one by one ({key}.<name>=<value>) or give a mapping ('{key}={{name: value}}')",
    "ListConfig": "give a list ('{key}=[a,b]')",
}


def explain(error: Exception, overrides: dict) -> str:
    """One line for a Hydra composition error. `overrides`: the override Hydra got → the one the user wrote."""
    message = str(error)
    cause = error.__cause__ or error.__context__
    match = re.match(r"Error merging override (.+)", message)
    if match:
        given = overrides.get(match.group(1).strip(), match.group(1).strip())
        detail = str(cause) if cause is not None else ""
        kinds, key = _MERGE.search(detail), _FULL_KEY.search(detail)
        if kinds and key:
            expected, got = kinds.groups()
            hint = _EXAMPLE[expected].format(key=key.group(1))
            return (
                f"the override {given!r} gives '{key.group(1)}' {_WHAT[got]}, but the config holds "
                f"{_WHAT[expected]} there: {hint}"
            )
        first = detail.splitlines()[0] if detail else ""
        return f"the override {given!r} could not be applied" + (f": {first}" if first else "")
    for internal, written in overrides.items():  # any other message: the user's spelling of their overrides
        message = message.replace(internal, written)
    return message
