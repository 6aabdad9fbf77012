"""Name patterns in config values (LoRA's `lora_target`): a regex or a comma-separated list of names."""

import re


def is_regex(target: str) -> bool:
    """True when `target` holds a regex metacharacter (then it is matched as one, not split on commas)."""
    return bool(re.search(r"[\\^$*+?()\[\]{}|]", target))
