"""The memory one step's rollout needs at the least, against the memory this machine has.

Every sample of a step is a row of prompt_length + response_length tokens in four int64 tensors the driver and
the workers hold (input_ids, attention_mask, position_ids, and prompts | responses: docs/contracts.md), so a
step needs at least samples × (prompt_length + response_length) × 32 bytes, before log-probs, advantages, the
engine's KV cache or any copy. That lower bound above the machine's memory is a run that cannot fit:
`response_length=1000000000` (an 8 GB allocation inside generate, then a traceback) or
`num_return_sequences_in_group=1000000` are refused with the numbers, at --dry_run and at start-up.
Device memory is not estimated: the engines size their KV caches themselves (vLLM reserves its share up front).
"""

import os

from roll.configs.loader import ConfigError

BYTES_PER_TOKEN = 4 * 8  # four int64 tensors per token of a row


def rollout_bytes_at_least(config) -> tuple[int, str] | None:
    """The kind's rows per step (PipelineConfig.rows_per_step) × its longest row × the bytes per token; None where
    the kind does not say."""
    rows = config.rows_per_step()
    if rows is None:
        return None
    (count, counted), (length, how) = rows, config.longest_row()
    return count * length * BYTES_PER_TOKEN, (
        f"{count:,} rows ({counted}) × {length:,} tokens ({how}) × {BYTES_PER_TOKEN} bytes"
    )


def machine_memory() -> int | None:
    """This machine's RAM in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_rollout_memory(config, available: int | None = None) -> None:
    available = machine_memory() if available is None else available
    if available is None:
        return
    found = rollout_bytes_at_least(config)
    if found is None:
        return
    needed, how = found
    if needed > available:
        raise ConfigError(
            f"one step's rollout needs at least {_gib(needed)} ({how}: token ids, masks and positions alone), more "
            f"than this machine's {_gib(available)} of memory; lower the row length or the rows per step"
        )


def _gib(count: int) -> str:
    return f"{count / 2**30:,.1f} GiB"
