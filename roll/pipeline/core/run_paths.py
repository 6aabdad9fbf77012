"""The run's other paths, before anything opens them: data files must be regular files (a directory, a FIFO or a
link to /dev/zero was reported as "does not exist", and --dry_run accepted the FIFO and /dev/zero), and the
metric sink's directory must be one this process can create and write (`logging_dir=/proc/roll_tb` failed
inside TensorBoard's SummaryWriter with a 47-line traceback)."""

import os
import tempfile
from pathlib import Path

from roll.configs.checks import roles
from roll.configs.loader import ConfigError
from roll.utils.paths import kind_of, not_a_regular_file


def data_files(config) -> list[tuple[str, str]]:
    """(key, path) of every data file the config names: each role's data_args and validation's."""
    blocks = [(f"{name}.data_args", worker.data_args) for name, worker in roles(config).items()]
    validation = getattr(config, "validation", None)
    if validation is not None:
        blocks.append(("validation.data_args", validation.data_args))
    out = []
    for key, data_args in blocks:
        names = getattr(data_args, "file_name", None) if data_args is not None else None
        for name in [names] if isinstance(names, str) else list(names or []):
            out.append((f"{key}.file_name", name))
    return out


def check_data_files(config, missing: list) -> None:
    """Refuses a data path that exists but is not a regular file; appends (key, path) of missing ones."""
    for key, name in data_files(config):
        problem = not_a_regular_file(name)
        if problem:
            raise ConfigError(
                f"'{key}' = {name!r} {problem}; a data file is a regular .jsonl, .json, .csv or .parquet file, "
                f"read whole"
            )
        if kind_of(name) == "missing":
            missing.append((key, name))


def tracker_dir(config) -> tuple[str, str] | None:
    """(key, directory) the metric sink writes into (roll.utils.tracking.Tracker), or None for stdout."""
    if config.track_with == "stdout":
        return None
    if config.track_with == "tensorboard" and "log_dir" in config.tracker_kwargs:
        return "tracker_kwargs.log_dir", str(config.tracker_kwargs["log_dir"])
    key = "logging_dir" if config.logging_dir else "output_dir"
    return key, os.path.join(config.tensorboard_dir, config.exp_name)


def check_tracker_dir(config) -> None:
    """The sink's directory exists and is writable, or the nearest existing folder above it lets this process
    create it; probed with a temporary directory that is removed at once."""
    found = tracker_dir(config)
    if found is None:
        return
    key, directory = found
    value = getattr(config, key, None) if "." not in key else directory
    existing = Path(directory).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    where = f"'{key}' = {value!r}: the {config.track_with} directory {directory}"
    if not existing.is_dir():
        raise ConfigError(f"{where} cannot be created: {existing} is {kind_of(existing)}, not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".roll-probe-", dir=existing))
    except OSError as error:
        raise ConfigError(
            f"{where} cannot be {'written' if str(existing) == str(Path(directory).absolute()) else 'created'}: "
            f"creating a folder in {existing} fails ({error.strerror or type(error).__name__}); choose a writable "
            f"directory"
        ) from None
