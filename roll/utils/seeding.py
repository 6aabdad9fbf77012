"""Seeding and RNG state capture, so a resumed run draws the same random numbers.

RNG states are saved in checkpoints that are loaded with `torch.load(weights_only=True)`, so they hold
only tensors and plain Python data: numpy's MT19937 key (a uint32 ndarray) travels as an int64 tensor.
"""

import random

import numpy as np
import torch


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def worker_seed(seed: int, rank: int) -> int:
    """The seed of a role's worker `rank`: deterministic in (config seed, rank), different per rank, and
    within numpy's 32-bit range for any config seed."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def get_rng_state() -> dict:
    numpy_state = np.random.get_state(legacy=False)
    state = {
        "python": random.getstate(),  # (version, tuple of ints, gauss float or None): plain data
        "numpy": {
            "key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            numpy_state["key"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["gauss"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
