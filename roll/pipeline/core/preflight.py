"""Start-up checks that need the file system or imports but no worker: run by the pipeline before it loads
the tokenizer or starts Ray, so a wrong path or class fails in a second with a message naming its key.

Config loading (`roll.configs`) cannot do these: `--dry_run` must work on a machine without the model.
"""

import os
from pathlib import Path

from roll.configs.loader import ConfigError, closest

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def check_roles(config) -> None:
    tokenizer, models = config.tokenizer_role(), config.role_specs()
    for name, worker in config.roles().items():
        if name in models and worker.model_args is not None:
            key, path = f"{name}.model_args.model_name_or_path", worker.model_args.model_name_or_path
            check_download_source(key, path, config.model_download_type)
            check_model_dir(key, path, name == tokenizer)
        check_worker_cls(f"{name}.worker_cls", worker.worker_cls, reward=name not in models)


def _looks_like_hub_id(value: str) -> bool:
    """'Qwen/Qwen2.5-7B': one slash, not a path a user would write for a local directory."""
    return value.count("/") == 1 and not value.startswith((".", "/", "~")) and not os.path.exists(value)


def check_download_source(key: str, value: str, source: str | None) -> None:
    """model_download_type: MODELSCOPE (ROLL's ModelScope download) is accepted as long as nothing needs
    downloading; a path that is not a local directory would be fetched, and roll fetches from the Hugging Face
    Hub only (transformers), so that fails here, before the wrong hub is asked."""
    if source == "MODELSCOPE" and not Path(value).expanduser().is_dir():
        raise ConfigError(
            f"'{key}' = {value!r} is not a local directory and model_download_type = MODELSCOPE: roll does not "
            f"download from ModelScope (it loads local directories, or Hugging Face Hub ids with "
            f"model_download_type HUGGINGFACE_HUB / null); download the model first (e.g. `modelscope download "
            f"--model {value} --local_dir <dir>`) and give that directory"
        )


def check_model_dir(key: str, value: str, tokenizer: bool = False) -> None:
    """`tokenizer`: the pipeline loads its tokenizer from this directory, so it must hold one."""
    if _looks_like_hub_id(value):
        return  # a model hub id: transformers resolves (or refuses) it
    path = Path(value).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"'{key}' = {value!r}: no such directory; give a local model directory (config.json, weights and "
            f"tokenizer files, e.g. what save_pretrained writes) or a model hub id such as 'Qwen/Qwen2.5-0.5B'"
        )
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"'{key}' = {value!r}: the directory has no config.json, so it is not a Hugging Face model "
            f"directory (it holds: {sorted(p.name for p in path.iterdir())[:8]})"
        )
    for weights in sorted(path.glob("*.safetensors")):
        problem = safetensors_problem(weights)
        if problem:
            raise ConfigError(
                f"'{key}' = {value!r}: {weights} {problem}; the file is damaged (an interrupted copy or download?): "
                f"copy or download the model again"
            )
    if tokenizer and not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(
            f"'{key}' = {value!r}: the directory has no tokenizer (none of {list(TOKENIZER_FILES)}); copy the "
            f"tokenizer files of the base model into it (tokenizer.save_pretrained)"
        )


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with a .safetensors file's framing, or None: it must be 8 bytes of header length, the JSON
    header, then exactly the bytes the header's data_offsets cover. Reads the header only (cheap)."""
    import json
    import struct

    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if 8 + length > size:
                return f"has {size} bytes, fewer than its {length}-byte header needs (truncated)"
            header = json.loads(handle.read(length))
        ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
    except (struct.error, ValueError, UnicodeDecodeError, KeyError, TypeError, IndexError, AttributeError) as error:
        return f"has no readable safetensors header ({type(error).__name__}: {error})"
    expected = 8 + length + max(ends, default=0)
    if size != expected:
        damage = "truncated" if size < expected else "extra bytes at the end"
        return f"has {size} bytes but its header describes {expected} ({damage})"
    return None


def check_worker_cls(key: str, dotted: str, reward: bool) -> None:
    import importlib

    from roll.distributed.worker import Worker
    from roll.workers.rewards.base import RewardWorker

    module_name, _, class_name = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(
            f"'{key}' = {dotted!r}: cannot import the module {module_name!r} ({error}); is it installed or on "
            f"PYTHONPATH?"
        ) from None
    cls = getattr(module, class_name, None)
    if cls is None:
        names = [n for n, v in vars(module).items() if isinstance(v, type)]
        raise ConfigError(
            f"'{key}' = {dotted!r}: the module {module_name!r} has no {class_name!r}{closest(class_name, names)}"
        )
    base = RewardWorker if reward else Worker
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(
            f"'{key}' = {dotted!r} is not a subclass of {base.__module__}.{base.__name__}; "
            + (
                "a reward worker subclasses RewardWorker and implements score(batch) -> list[float] "
                "(docs/architecture.md, examples/custom_reward/)"
                if reward
                else "a role's worker class subclasses roll.distributed.worker.Worker"
            )
        )
