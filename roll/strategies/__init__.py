"""Strategy registry: `strategy_name` in a role's `strategy_args` → engine adapter class.

A new engine is one module with its strategy class (capabilities as class attributes, see
roll/strategies/base.py) plus one line here; the config checks and `create_strategy` find it by name.
Classes are imported on first use, and a strategy module imports without its engine, so the
capabilities can be read (config checks, --dry_run) where the engine is not installed.
"""

from importlib import import_module

_STRATEGIES = {
    "hf_infer": "roll.strategies.hf_infer.HFInferStrategy",
    "deepspeed_train": "roll.strategies.deepspeed_train.DeepSpeedTrainStrategy",
    "deepspeed_infer": "roll.strategies.deepspeed_train.DeepSpeedInferStrategy",
    "vllm": "roll.strategies.vllm_infer.VLLMInferStrategy",
    "sglang": "roll.strategies.sglang_infer.SGLangInferStrategy",  # unverified here: no CPU build of SGLang
    "fsdp2_train": "roll.strategies.fsdp2_train.FSDP2TrainStrategy",
    "fsdp2_infer": "roll.strategies.fsdp2_train.FSDP2InferStrategy",
    # megatron-core (the `megatron` extra); issue #5
    "megatron_train": "roll.strategies.megatron_train.MegatronTrainStrategy",
    "megatron_infer": "roll.strategies.megatron_train.MegatronInferStrategy",
}


def register_strategy(name: str, class_path: str) -> None:
    """Adds an engine under `name` (a strategy class in a module of your own, by dotted path): the same as a
    line in the table above. Registering a taken name under another class is an error."""
    if _STRATEGIES.get(name, class_path) != class_path:
        raise ValueError(f"strategy_name {name!r} is already {_STRATEGIES[name]}; pick another name")
    _STRATEGIES[name] = class_path


def strategy_names() -> list[str]:
    """Registered names, in registry order (the order config errors list them in)."""
    return list(_STRATEGIES)


def strategy_class(name: str) -> type:
    """The strategy class registered as `name` (imports its module, not its engine)."""
    if name not in _STRATEGIES:
        raise ValueError(f"unknown strategy_name {name!r}; valid: {sorted(_STRATEGIES)}")
    module_name, _, class_name = _STRATEGIES[name].rpartition(".")
    try:
        return getattr(import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise ImportError(f"strategy_name {name!r}: cannot load {_STRATEGIES[name]} ({error})") from error


def create_strategy(name: str, worker):
    return strategy_class(name)(worker)
