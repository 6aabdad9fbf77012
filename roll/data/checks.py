"""Data a run would train on as garbage, refused before it starts (issue 42).

Two things no single row reveals: a reward domain that grades against a ground truth whose rows have none
(missing, null, NaN or empty: each such sample scores 0 whatever the model writes, so the run "trains" on
zero rewards to the end), and a data file with fewer prompts than one step draws (the sampler then wraps
within the step: one row and rollout_batch_size 64 train on 64 copies of one prompt). Both are checked at
start-up on the loaded rows and by `--dry_run` on the files as they are.
"""

import math
from collections import defaultdict

from roll.utils.errors import InputError
from roll.utils.logging import get_logger

logger = get_logger("roll.data")

# How an unusable ground truth shows after `datasets` has read it (a bare JSON NaN is a float NaN where the
# whole column is numbers, and None where it mixes types).
MISSING, NAN, EMPTY = "missing or null", "NaN", "empty"
ALLOW_REPEATS_KEY = "allow_repeated_prompts_in_step"


def truth_defect(value) -> str | None:
    """Why `value` cannot be a ground truth (MISSING, NAN, EMPTY), or None if it can."""
    if value is None:
        return MISSING
    if isinstance(value, float) and math.isnan(value):
        return NAN
    if isinstance(value, str) and not value.strip():
        return EMPTY
    return None


def check_ground_truths(rows: list[dict], files: list[str], graders: dict, column: str, key: str) -> None:
    """Refuse rows of a domain that grades against a ground truth (`graders`: domain → the grading worker
    classes' names, empty for a domain that does not) whose truth is unusable. `rows` carry "source" (an
    index into `files`), "index" (the row's in its file), "domain" and "truth_defect" (truth_defect of the
    value as read). One InputError names every file and domain with such rows: the column, how many of how
    many and why, the first rows."""
    bad: dict = defaultdict(lambda: defaultdict(list))  # (file, domain) → defect → row indices
    totals: dict = defaultdict(int)
    for row in rows:
        if not graders.get(row["domain"]):
            continue
        where = files[row["source"]], row["domain"]
        totals[where] += 1
        if row["truth_defect"] is not None:
            bad[where][row["truth_defect"]].append(row["index"])
    if not bad:
        return
    parts = []
    for (name, domain), defects in bad.items():
        indices = sorted(i for found in defects.values() for i in found)
        why = ", ".join(f"{len(found)} {defect}" for defect, found in defects.items())
        first = ", ".join(map(str, indices[:5])) + (", …" if len(indices) > 5 else "")
        parts.append(
            f"{name}: column '{column}' has no usable value in {len(indices)} of {totals[name, domain]} rows of "
            f"domain '{domain}' ({why}; rows {first}), whose reward grades against it "
            f"({', '.join(graders[domain])})"
        )
    raise InputError(
        f"{key}: {'; '.join(parts)}. Each such sample would score 0 whatever the model answers, and the run would "
        f"train on nothing. Put the reference answer in every row (or set {key}.ground_truth_key to the column "
        f"that holds it)"
    )


def check_prompts_per_step(shortfalls: list, rollout_batch_size: int, allow: bool, key: str) -> None:
    """Refuse (or with `allow`, warn about) a step that would draw a prompt more than once: `shortfalls` is
    the sampler's [(pool, its prompts, the prompts one step draws from it)] where the pool is too small
    (PromptSampler.shortfalls)."""
    if not shortfalls:
        return
    what = "; ".join(
        f"{pool} has {size} prompt{'s' if size != 1 else ''} and each step draws {needed}"
        for pool, size, needed in shortfalls
    )
    repeats = max(math.ceil(needed / max(size, 1)) for _, size, needed in shortfalls)
    if allow:
        logger.warning(
            "%s: %s (rollout_batch_size=%d): each step trains on the same prompts up to %d times (%s: true)",
            key,
            what,
            rollout_batch_size,
            repeats,
            ALLOW_REPEATS_KEY,
        )
        return
    raise InputError(
        f"{key}: {what} (rollout_batch_size={rollout_batch_size}), so every step would train on the same "
        f"prompts up to {repeats} times. Add prompts, lower rollout_batch_size to at most the prompts there are, "
        f"or set {ALLOW_REPEATS_KEY}: true to train on the repeats anyway"
    )
