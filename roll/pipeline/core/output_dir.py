"""A run's claim on its output directories, taken at start-up before any worker starts.

1. Each directory (output_dir, and checkpoint_dir when set) must be writable: a read-only or unwritable one is
   refused with its name and the reason, not an OSError mid-run.
2. One run at a time: the run holds an exclusive lock (`flock` on `<dir>/.roll.lock`, which names its pid)
   until `close()` or the process ends (the kernel drops the lock of a killed process). A second run into
   the same directory fails at once, naming the holder's pid and host.
3. No silent mixing: a fresh run (resume_from_checkpoint: false) into a directory that holds checkpoints of
   an earlier run is refused, since its saves would replace some of them, move `latest` back and leave the
   rest; `overwrite_output_dir: true` removes them first, `resume_from_checkpoint: true` continues them.
"""

import fcntl
import os
import shutil
import socket
from pathlib import Path

from roll.utils import checkpoint
from roll.utils.errors import InputError
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline")
LOCK_FILE = ".roll.lock"


class OutputDirLock:
    """The locks of one run; `release()` frees them (idempotent)."""

    def __init__(self, handles: list):
        self._handles = handles

    def release(self) -> None:
        for handle in self._handles:
            handle.close()  # closing the descriptor drops its flock
        self._handles = []


def claim_output_dirs(config) -> OutputDirLock:
    """Check, lock and (with overwrite_output_dir) clear the run's output directories; see the module doc."""
    directories = [config.output_dir]
    if config.checkpoint_dir and os.path.realpath(config.checkpoint_dir) != os.path.realpath(config.output_dir):
        directories.append(config.checkpoint_dir)
    handles = []
    try:
        for key, directory in zip(("output_dir", "checkpoint_dir"), directories):
            handles.append(_lock(key, directory))
        _check_earlier_checkpoints(config)
    except BaseException:
        OutputDirLock(handles).release()
        raise
    return OutputDirLock(handles)


def _lock(key: str, directory: str):
    path = Path(directory) / LOCK_FILE
    try:
        os.makedirs(directory, exist_ok=True)
        handle = open(path, "a+")
    except OSError as error:
        raise InputError(
            f"'{key}' = {directory!r} is not writable ({error.strerror or error}): the run writes its samples, "
            f"logs and checkpoints there; choose a directory you can write (e.g. {key}=./output)"
        ) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown pid"
        handle.close()
        raise InputError(
            f"'{key}' = {directory!r} is in use by another run ({holder}, lock file {path}); two runs in one "
            f"directory would overwrite each other's checkpoints and samples: wait for it to end or choose "
            f"another {key}"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    return handle


def _check_earlier_checkpoints(config) -> None:
    from roll.pipeline.core.checkpointing import checkpoint_base

    root = checkpoint.checkpoint_root(checkpoint_base(config))
    if config.resume_from_checkpoint or not root.is_dir():
        return
    found = sorted(p.name for p in root.iterdir() if p.name == checkpoint.LATEST or p.name.startswith("step-"))
    if not found:
        return
    if config.overwrite_output_dir:
        doomed = root.with_name(f"{root.name}.deleting-{os.getpid()}")
        os.replace(root, doomed)  # atomic: from here on no run sees them as checkpoints
        shutil.rmtree(doomed)
        logger.warning("overwrite_output_dir: removed the earlier run's checkpoints %s from %s", found, root)
        return
    raise InputError(
        f"{root} holds checkpoints of an earlier run ({', '.join(found[:6])}{', ...' if len(found) > 6 else ''}); "
        f"a fresh run would replace some of them, point 'latest' back and keep the rest. Continue that run "
        f"(resume_from_checkpoint: true), choose another output_dir / checkpoint_dir, or set "
        f"overwrite_output_dir: true to delete them first"
    )
