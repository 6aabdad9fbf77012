"""Atomic checkpoint directories: a step directory becomes visible only once it is complete.

Layout: <output_dir>/checkpoints/step-<N>/ plus a `latest` file naming the newest complete step.
Writers fill `step-<N>.tmp/` and rename it; a crash mid-write leaves only a `.tmp` directory that
resume ignores (and the next save of that step replaces).
"""

import os
import shutil
from pathlib import Path

LATEST = "latest"


def checkpoint_root(output_dir: str) -> Path:
    return Path(output_dir) / "checkpoints"


def staging_dir(output_dir: str, step: int) -> Path:
    path = checkpoint_root(output_dir) / f"step-{step}.tmp"
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def commit(output_dir: str, step: int) -> Path:
    """Publish the staged checkpoint of `step` and point `latest` at it (both renames are atomic)."""
    root = checkpoint_root(output_dir)
    staged, final, replaced = root / f"step-{step}.tmp", root / f"step-{step}", root / f"step-{step}.old"
    if final.exists():  # saving a step again (a run restarted from an earlier checkpoint)
        if replaced.exists():
            shutil.rmtree(replaced)
        os.replace(final, replaced)
    os.replace(staged, final)
    pointer_tmp = root / (LATEST + ".tmp")
    pointer_tmp.write_text(f"step-{step}\n")
    os.replace(pointer_tmp, root / LATEST)
    if replaced.exists():
        shutil.rmtree(replaced)
    return final


def find_checkpoint(output_dir: str, resume_from_checkpoint) -> Path | None:
    """`resume_from_checkpoint`: False/None → no resume; True → latest under output_dir; str → that dir."""
    if not resume_from_checkpoint:
        return None
    if isinstance(resume_from_checkpoint, str):
        path = Path(resume_from_checkpoint)
        if not path.is_dir():
            raise FileNotFoundError(
                f"resume_from_checkpoint: {path} is not a checkpoint directory; give a "
                f"'<output_dir>/checkpoints/step-N' directory or true to resume from the latest one"
            )
        return path
    pointer = checkpoint_root(output_dir) / LATEST
    if not pointer.exists():
        return None  # resume requested but nothing saved yet: a fresh start (logged by the caller)
    path = checkpoint_root(output_dir) / pointer.read_text().strip()
    if not path.is_dir():
        raise FileNotFoundError(
            f"{pointer} names {path.name}, which does not exist; pass resume_from_checkpoint: "
            f"<output_dir>/checkpoints/step-N to pick a complete checkpoint"
        )
    return path


def load_state(path) -> dict:
    """A roll-written `.pt` state file (RNG states, step counters, optimizer and scheduler state): loaded with
    `weights_only=True`, so a replaced or untrusted file cannot run code while it is unpickled."""
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise pickle.UnpicklingError(
            f"{path}: refused to load: it holds objects other than tensors and plain Python data, which roll "
            f"never writes (was the file replaced?). torch says: {error}"
        ) from None
