"""Start-up checks that need the file system or imports but no worker: run by the pipeline before it loads
the tokenizer or starts Ray, and by `--dry_run` for what is on this machine, so a wrong path, class, model
directory, template or size fails in a second with one message naming its key (every problem found at once).

Config loading (`roll.configs`) cannot do these: `--dry_run` must work on a machine without the model, so there
a path that does not exist here is listed as not checked (`check_roles(config, missing_ok=True)`) instead.
"""

import os
import sys
from pathlib import Path

from roll.configs.loader import ConfigError, closest, collected
from roll.configs.sizes import check_rollout_memory
from roll.pipeline.core import model_files, run_paths
from roll.pipeline.core.reward_check import check_reward_worker, raised_at
from roll.utils.errors import UserError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
FAILED = object()  # a check that raised (its problems are collected)


def check_roles(config, missing_ok: bool = False) -> list[str]:
    """Every start-up check, all problems in one ConfigError. `missing_ok` (--dry_run): a model directory or data
    file that is not on this machine is skipped; returns a note per skipped path."""
    problems, missing = [], []

    def attempt(check, *args):  # the check's result, or FAILED with its problems collected
        try:
            return check(*args)
        except UserError as error:
            problems.extend(getattr(error, "problems", None) or [("", str(error))])
            return FAILED

    tokenizer, models = config.tokenizer_role(), config.model_role_specs()
    local_models: dict[str, object] = {}  # path → its transformers config (FAILED: refused or a hub id), checked once
    for name, worker in config.roles().items():
        if name in models and worker.model_args is not None:
            key, path = f"{name}.model_args.model_name_or_path", worker.model_args.model_name_or_path
            attempt(check_download_source, key, path, config.model_download_type)
            if missing_ok and not _looks_like_hub_id(path) and not Path(path).expanduser().exists():
                missing.append((key, path))
            elif path not in local_models:  # another role's directory: checked once (with the tokenizer's needs)
                needs_tokenizer = getattr(config, tokenizer).model_args.model_name_or_path == path
                local_models[path] = attempt(check_model_dir, key, path, needs_tokenizer)
                if local_models[path] is not FAILED and not _looks_like_hub_id(path):
                    local_models[path] = attempt(_check_model_contents, key, path)
                    if local_models[path] is not FAILED:
                        attempt(model_files.check_sequence_length, key, path, local_models[path], config.longest_row())
                elif local_models[path] is not FAILED:
                    local_models[path] = FAILED  # a hub id: nothing on disk to read before transformers fetches it
        reward = name not in models  # a kind's extra role: RLVR's reward scorers
        cls = attempt(check_worker_cls, f"{name}.worker_cls", worker.worker_cls, reward)
        if reward and cls is not FAILED:
            attempt(check_reward_worker, f"{name}.worker_cls", cls, worker, config.system_envs)
    tokenizer_dir = getattr(config, tokenizer).model_args.model_name_or_path
    if local_models.get(tokenizer_dir, FAILED) is not FAILED:  # a readable local model directory: the kind's own
        for check in config.start_up_checks(tokenizer_dir):
            attempt(check)
    attempt(run_paths.check_data_files, config, missing)
    attempt(run_paths.check_tracker_dir, config)
    attempt(check_rollout_memory, config)
    cluster = cluster_problem(config)
    if cluster and not missing_ok:
        problems.append(("num_nodes", cluster))
    if problems:
        raise collected(problems)
    notes = [f"not on this machine, checked at start-up: {key} = {path!r}" for key, path in missing]
    # a dry run on a machine other than the cluster's (a multi-node recipe planned on a laptop) is not refused
    return notes + ([f"note: a run started here would be refused: {cluster}"] if cluster else [])


def _check_model_contents(key: str, value: str):
    """config.json, model type, architecture and weight shapes; returns the transformers config."""
    path = Path(value).expanduser()
    model = model_files.check_model_config(key, path)
    model_files.check_weight_shapes(key, path, model)
    return model


def cluster_problem(config) -> str | None:
    """num_nodes against the nodes there are: this process's Ray session's, else one for the local Ray roll would
    start when no cluster is given; a cluster to attach to is counted by init_ray when it attaches."""
    if config.num_nodes <= 1:
        return None
    from roll.distributed.ray_utils import existing_cluster_address

    ray = sys.modules.get("ray")
    connected = ray is not None and ray.is_initialized()  # the launcher's early local Ray, or a test's session
    address = existing_cluster_address()
    if address is not None and not connected:
        return None  # init_ray counts the nodes when it attaches
    nodes = sum(1 for node in ray.nodes() if node.get("Alive")) if connected else 1
    if address is not None:
        where = f"the Ray cluster at {address} has"
    else:
        where = (
            "no Ray cluster is given (RAY_ADDRESS is unset and no `ray start` cluster runs here), and the local "
            "Ray roll starts has"
        )
    if nodes >= config.num_nodes:
        return None
    return (
        f"'num_nodes' = {config.num_nodes}, but {where} {nodes} node{'s' * (nodes != 1)}: set num_nodes: {nodes} "
        f"(and num_gpus_per_node to the devices of each), or start a {config.num_nodes}-node cluster and set "
        f"RAY_ADDRESS (docs/cluster.md)"
    )


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


def check_worker_cls(key: str, dotted: str, reward: bool):
    """The class `dotted` names (imported), or a ConfigError naming the key: a module that is not there, one that
    raises while it is imported (with where it raised), a missing name, or a class of the wrong base."""
    import importlib

    from roll.distributed.worker import Worker
    from roll.workers.rewards.base import RewardWorker

    module_name, _, class_name = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):  # not there at all
            raise ConfigError(
                f"'{key}' = {dotted!r}: cannot import the module {module_name!r} ({error}); is it installed or on "
                f"PYTHONPATH?"
            ) from None
        raise _raised_on_import(key, dotted, module_name, error) from None
    except Exception as error:  # the module is there and raised while it ran (a SyntaxError included)
        raise _raised_on_import(key, dotted, module_name, error) from None
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
    return cls


def _raised_on_import(key: str, dotted: str, module_name: str, error: Exception) -> ConfigError:
    where = raised_at(error)
    if isinstance(error, SyntaxError) and error.filename:
        where = f" (at {error.filename} line {error.lineno})"
    text = " ".join(str(error).split())
    return ConfigError(
        f"'{key}' = {dotted!r}: importing the module {module_name!r} raised {type(error).__name__}: {text}{where}"
    )
