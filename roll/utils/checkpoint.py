"""Checkpoint directories that cannot be half-written: a step directory becomes visible only once complete.

Layout: <output_dir>/checkpoints/step-<N>/ plus a `latest` file naming the newest complete step.
A save fills `step-<N>.tmp/`, then
  1. writes `MANIFEST.json` last: every file's relative path, size and sha256;
  2. fsyncs every file and directory of the staged tree (the data is on disk before it becomes visible);
  3. renames `step-<N>.tmp` to `step-<N>` and fsyncs the parent (the rename is on disk);
  4. points `latest` at it (write `latest.tmp`, fsync, rename, fsync the parent);
  5. only then removes the checkpoints beyond `max_ckpt_to_keep` (each is renamed to `*.deleting` first,
     so a crash mid-removal never leaves a half-deleted `step-<M>` that looks complete).
A crash at any point leaves the previous checkpoint intact. Resume (`find_checkpoint`) takes the step
`latest` names if its manifest matches the files (sizes and sha256), else the newest step directory that does,
and logs every `.tmp` (unfinished save) or mismatching (cut short, corrupted) directory it skips.

Why sha256 and not a cheaper checksum: hashing runs at disk speed on the driver once per save and once per
load (a few seconds per GB), small next to writing the optimizer state; it detects any corruption (a
truncated or overwritten shard, bit rot, a file copied from another run), and the sizes alone already
catch the common case — a save cut short — at the price of a `stat` per file when scanning.
"""

import errno
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from roll.utils.errors import MissingInput
from roll.utils.logging import get_logger

logger = get_logger("roll.checkpoint")
LATEST = "latest"
MANIFEST = "MANIFEST.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


class IncompleteCheckpoint(Exception):
    """A checkpoint directory whose manifest is missing or does not match its files."""


def checkpoint_root(output_dir: str) -> Path:
    return Path(output_dir) / "checkpoints"


def staging_dir(output_dir: str, step: int) -> Path:
    path = checkpoint_root(output_dir) / f"step-{step}.tmp"
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


# ---- manifest ---------------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(directory: Path) -> dict:
    """Writes `MANIFEST.json` (relative path → size, sha256) of every file under `directory`; call it last."""
    directory = Path(directory)
    files = {str(p.relative_to(directory)): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in _files(directory)}
    manifest = {"format": 1, "files": files}
    _write_durably(directory / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def verify(directory: Path, checksums: bool = True) -> None:
    """Raises IncompleteCheckpoint naming the first problem: no manifest, a missing, extra-sized or changed
    file. `checksums=False` compares sizes only (cheap, used when scanning for the newest complete step)."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        raise IncompleteCheckpoint(f"{directory} has no {MANIFEST}: its save did not finish")
    try:
        files = json.loads(manifest_path.read_text())["files"]
    except (ValueError, KeyError, UnicodeDecodeError) as error:
        raise IncompleteCheckpoint(f"{manifest_path} is unreadable ({error}): its save did not finish") from None
    for name, entry in files.items():
        path = directory / name
        if not path.is_file():
            raise IncompleteCheckpoint(f"{directory}: {name} is listed in {MANIFEST} but missing")
        size = path.stat().st_size
        if size != entry["size"]:
            raise IncompleteCheckpoint(f"{directory}: {name} has {size} bytes, {MANIFEST} says {entry['size']}")
        if checksums and _sha256(path) != entry["sha256"]:
            raise IncompleteCheckpoint(f"{directory}: {name} does not match its sha256 in {MANIFEST} (corrupted)")


def out_of_space(error: BaseException, path: Path) -> bool:
    """Whether a failed save ran out of disk: ENOSPC anywhere in the exception chain (also as text, from a
    worker), or under 1 MiB left where it wrote. The free-space test catches writers that lose the errno
    (torch.save: "PytorchStreamWriter failed writing file ... unexpected pos")."""
    seen = error
    while seen is not None:
        if (isinstance(seen, OSError) and seen.errno == errno.ENOSPC) or "No space left on device" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        return shutil.disk_usage(path if path.exists() else path.parent).free < 1 << 20
    except OSError:
        return False


# ---- durability -------------------------------------------------------------------------------------------
def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(directory: Path) -> None:
    """fsync every file, then every directory bottom-up (a directory's entries are on disk after its files)."""
    for root, _dirs, files in os.walk(directory, topdown=False):
        for name in files:
            _fsync_path(Path(root) / name)
        _fsync_path(Path(root))


def _write_durably(path: Path, text: str) -> None:
    """`path` ← text via a temporary name: write, fsync, rename, fsync the parent."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync_path(path.parent)


# ---- publish, prune, find ---------------------------------------------------------------------------------
def commit(output_dir: str, step: int, max_to_keep: int = 0) -> Path:
    """Publish the staged checkpoint of `step`: manifest, fsync, rename, point `latest` at it; then keep only
    the newest `max_to_keep` complete checkpoints (0 = keep all)."""
    root = checkpoint_root(output_dir)
    staged, final, replaced = root / f"step-{step}.tmp", root / f"step-{step}", root / f"step-{step}.old"
    write_manifest(staged)
    _fsync_tree(staged)
    if final.exists():  # saving a step again (a run restarted from an earlier checkpoint)
        if replaced.exists():
            shutil.rmtree(replaced)
        os.replace(final, replaced)
    os.replace(staged, final)
    _fsync_path(root)
    _point_latest(root, step)
    if replaced.exists():
        shutil.rmtree(replaced)
    if max_to_keep > 0:
        prune(output_dir, max_to_keep, keep=final)
    return final


def _point_latest(root: Path, step: int) -> None:
    _write_durably(root / LATEST, f"step-{step}\n")


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    """(step, path) of every `step-N` directory, newest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return sorted(found, reverse=True)


def prune(output_dir: str, max_to_keep: int, keep: Path) -> list[Path]:
    """Removes all but the newest `max_to_keep` step directories (never `keep`, the one just committed)."""
    root = checkpoint_root(output_dir)
    others = [path for _, path in _step_dirs(root) if path != keep]
    removed = others[max(max_to_keep - 1, 0) :]
    for path in removed:
        doomed = path.with_name(path.name + ".deleting")
        os.replace(path, doomed)  # atomic: from here on it is not a step directory
        shutil.rmtree(doomed)
        logger.info("removed checkpoint %s (max_ckpt_to_keep=%d)", path, max_to_keep)
    for leftover in root.glob("step-*.deleting"):  # a removal a crash interrupted
        shutil.rmtree(leftover, ignore_errors=True)
    return removed


def _log_unfinished(root: Path) -> None:
    for path in sorted(root.glob("step-*.tmp")):
        logger.warning("ignoring unfinished checkpoint %s (its save did not complete; no %s)", path, MANIFEST)


def find_checkpoint(output_dir: str, resume_from_checkpoint, checksums: bool = False) -> Path | None:
    """`resume_from_checkpoint`: False/None → no resume; True → the newest complete checkpoint under
    output_dir (the one `latest` names, else the newest step directory whose manifest matches); str → that
    directory, which must be complete. `checksums`: compare every file's sha256 too (the checkpoint a run
    loads), so a corrupted newest checkpoint of the same size falls back to the previous complete one."""
    if not resume_from_checkpoint:
        return None
    if isinstance(resume_from_checkpoint, str):
        path = Path(resume_from_checkpoint)
        if not path.is_dir():
            raise MissingInput(
                f"resume_from_checkpoint: {path} is not a checkpoint directory; give a "
                f"'<output_dir>/checkpoints/step-N' directory or true to resume from the latest one"
            )
        try:
            verify(path, checksums=checksums)
        except IncompleteCheckpoint as error:
            raise MissingInput(
                f"resume_from_checkpoint: {error}; give a complete '<output_dir>/checkpoints/step-N' directory "
                f"or true to resume from the newest complete one"
            ) from None
        return path
    root = checkpoint_root(output_dir)
    _log_unfinished(root)
    candidates = _step_dirs(root)
    pointer = root / LATEST
    if pointer.exists():
        named = root / pointer.read_text().strip()
        candidates = [(-1, named)] + [(s, p) for s, p in candidates if p != named]
    skipped = []
    for _, path in candidates:
        try:
            if not path.is_dir():
                raise IncompleteCheckpoint(f"{pointer} names {path.name}, which does not exist")
            verify(path, checksums=checksums)
        except IncompleteCheckpoint as error:
            logger.warning("ignoring checkpoint %s: %s", path, error)
            skipped.append(str(error))
            continue
        if skipped:
            logger.warning("resuming from %s, the newest complete checkpoint", path)
        return path
    if skipped:
        raise MissingInput(
            f"resume_from_checkpoint: no complete checkpoint under {root}: " + "; ".join(skipped) + ". Pass "
            "resume_from_checkpoint: false to start over, or a complete <output_dir>/checkpoints/step-N"
        )
    return None  # resume requested but nothing saved yet: a fresh start (logged by the caller)


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
