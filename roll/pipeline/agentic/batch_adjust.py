"""ROLL's batch_adjust_mode: a step's rows that are not a multiple of the global train batch.

copy pads them up with loss-free rows (pipeline.py); delete, random_sample and auto (when it picks delete) train
on fewer rows instead, drawn by the caller's seeded generator so a resumed run drops the same ones.
"""

import numpy as np

MODES = ("copy", "delete", "auto", "random_sample")


def rows_to_keep(count: int, multiple: int, mode: str, rng: np.random.Generator) -> np.ndarray | None:
    """Sorted indices of the rows to keep, or None when every row stays (and padding fills the rest). ROLL's rules:
    delete drops count % multiple random rows; random_sample keeps `multiple` random rows (one global batch);
    auto deletes unless that would drop half the rows or more; where nothing would remain, copy."""
    if mode not in MODES:
        raise ValueError(f"batch_adjust_mode={mode!r}; valid: {MODES}")
    extra = count % multiple
    if extra == 0 or count < multiple:
        return None
    if mode == "auto":
        mode = "copy" if extra >= 0.5 * count else "delete"
    if mode == "random_sample":
        return np.sort(rng.choice(count, multiple, replace=False))
    if mode == "delete":
        return np.sort(rng.choice(count, count - extra, replace=False))
    return None
