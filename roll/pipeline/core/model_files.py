"""A model directory read the way its loaders will read it, without loading a weight: config.json, the model
type and architecture transformers must know, the weight shapes the safetensors headers declare against the
shapes the config builds (a model built on the meta device), and the longest sequence the model takes.

Without these a broken directory failed inside a worker after Ray started (a 74-line traceback for weights
of other shapes); here it fails in the driver, at start-up and at --dry_run, naming the key and the file.
"""

import json
import struct
from pathlib import Path

from roll.configs.loader import ConfigError, closest

SHOWN = 3  # mismatching tensors named in a message; the rest are counted


def read_config_json(key: str, path: Path) -> dict:
    """config.json as a dict; a ConfigError naming the line and column where it does not parse."""
    file = path / "config.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        reason = f"{error.reason} at byte {error.start}"
        raise ConfigError(f"'{key}' = '{path}': {file} is not UTF-8 text ({reason})") from None
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"'{key}' = '{path}': {file} is not valid JSON ({error.msg} at line {error.lineno} column "
            f"{error.colno}); fix it or copy the model's config.json again"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"'{key}' = '{path}': {file} holds a JSON {type(data).__name__}, not an object")
    return data


def check_model_config(key: str, path: Path):
    """The transformers config of the directory (AutoConfig), after checking that transformers knows its
    model_type and architecture; a model with its own code (auto_map) is left to its code."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    data = read_config_json(key, path)
    kind = data.get("model_type")
    if "auto_map" not in data:
        if not isinstance(kind, str) or kind not in CONFIG_MAPPING_NAMES:
            import transformers

            raise ConfigError(
                f"'{key}' = '{path}': config.json's model_type {kind!r} is not a model type transformers "
                f"{transformers.__version__} knows (is config.json from another model, or does the model need a "
                f"newer transformers?){closest(str(kind), CONFIG_MAPPING_NAMES)}"
            )
        for name in data.get("architectures") or []:
            _check_architecture(key, path, name)
    try:
        return AutoConfig.from_pretrained(str(path))
    except Exception as error:  # a value the config class refuses: its own message, with the file
        raise ConfigError(
            f"'{key}' = '{path}': transformers cannot read its config.json ({type(error).__name__}: "
            f"{_first_line(error)})"
        ) from None


def _check_architecture(key: str, path: Path, name: str) -> None:
    import transformers

    try:
        found = getattr(transformers, name, None)
    except Exception:  # a lazily imported model module that fails to import
        found = None
    if found is None:
        known = [n for n in dir(transformers) if n.endswith(("ForCausalLM", "ForConditionalGeneration"))]
        raise ConfigError(
            f"'{key}' = '{path}': config.json's architectures names {name!r}, which transformers "
            f"{transformers.__version__} does not have{closest(name, known)}"
        )


def safetensors_shapes(files) -> dict:
    """tensor name → shape, from the headers of `files` (.safetensors; framing already checked)."""
    shapes = {}
    for file in files:
        with open(file, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        shapes.update({name: list(entry["shape"]) for name, entry in header.items() if name != "__metadata__"})
    return shapes


def built_shapes(config) -> dict:
    """tensor name → shape of the model the config builds (its first architecture, else a causal LM), built on
    the meta device: no memory, no initialisation."""
    import torch
    import transformers

    cls = next(
        (getattr(transformers, n) for n in (config.architectures or []) if hasattr(transformers, n)),
        transformers.AutoModelForCausalLM,
    )
    with torch.device("meta"):
        model = cls._from_config(config) if cls is not transformers.AutoModelForCausalLM else cls.from_config(config)
    return {name: list(tensor.shape) for name, tensor in model.state_dict().items()}


def shape_differences(have: dict, want: dict) -> list[str]:
    """'name [a, b] there, [c, d] here' for every tensor in both with different shapes."""
    return [f"{name} {have[name]} vs {want[name]}" for name in have if name in want and have[name] != want[name]]


def check_weight_shapes(key: str, path: Path, config) -> None:
    """The safetensors tensors against the model the config builds (quantized weights are packed: not compared)."""
    files = sorted(path.glob("*.safetensors"))
    if not files or getattr(config, "quantization_config", None) is not None:
        return
    try:
        want = built_shapes(config)
    except Exception as error:
        raise ConfigError(
            f"'{key}' = '{path}': transformers cannot build the model its config.json describes "
            f"({type(error).__name__}: {_first_line(error)})"
        ) from None
    differ = shape_differences(safetensors_shapes(files), want)
    if differ:
        more = f" (and {len(differ) - SHOWN} more)" if len(differ) > SHOWN else ""
        raise ConfigError(
            f"'{key}' = '{path}': {len(differ)} weights in its safetensors files do not have the shapes its "
            f"config.json gives (file vs config): {'; '.join(differ[:SHOWN])}{more}; the weights and config.json "
            f"come from different models"
        )


def check_resumed_shapes(checkpoint: Path, roles: dict) -> None:
    """A checkpoint's weights against the models the run would load them into: each trained role's `hf/` copy
    in the step directory against its model_name_or_path's safetensors headers (`roles`: role → model
    directory), before any engine tries to load one into the other."""
    from roll.utils.errors import InputError

    for role, model_dir in roles.items():
        saved = sorted((Path(checkpoint) / role / "hf").glob("*.safetensors"))
        current = sorted(Path(model_dir).expanduser().glob("*.safetensors"))
        if not saved or not current:
            continue  # nothing to compare (a hub id, .bin weights, a checkpoint without its hf copy)
        differ = shape_differences(safetensors_shapes(saved), safetensors_shapes(current))
        if differ:
            more = f" (and {len(differ) - SHOWN} more)" if len(differ) > SHOWN else ""
            raise InputError(
                f"resume_from_checkpoint: {checkpoint} holds {role} weights of other shapes than "
                f"'{role}.model_args.model_name_or_path' = '{model_dir}' (checkpoint vs model): "
                f"{'; '.join(differ[:SHOWN])}{more}; resume with the model the checkpoint was trained from, or start "
                f"a new run (resume_from_checkpoint: false or another output_dir)"
            )


def max_positions(config) -> int | None:
    """The longest sequence the model declares (max_position_embeddings, or n_positions), or None."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(text, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_sequence_length(key: str, path: Path, config, longest: tuple[int, str]) -> None:
    """`longest`: the kind's longest row (PipelineConfig.longest_row: tokens, how they are counted)."""
    limit = max_positions(config)
    total, how = longest
    if limit is not None and total > limit:
        raise ConfigError(
            f"{how} = {total} tokens, more than the model's max_position_embeddings = {limit} ('{key}' = '{path}', "
            f"config.json): lower them"
        )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
