"""Strategy registry: `strategy_name` in a role's `strategy_args` → engine adapter class."""

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
# Named in configs and docs, not implemented yet: a clear error instead of a silent fallback.
_PLANNED: dict[str, str] = {}
IMPLEMENTED = tuple(_STRATEGIES)


def create_strategy(name: str, worker):
    if name in _PLANNED:
        raise NotImplementedError(
            f"strategy_name {name!r} is not implemented yet ({_PLANNED[name]}); available now: {sorted(_STRATEGIES)}"
        )
    if name not in _STRATEGIES:
        raise ValueError(f"unknown strategy_name {name!r}; valid: {sorted(_STRATEGIES) + sorted(_PLANNED)}")
    module_name, _, class_name = _STRATEGIES[name].rpartition(".")
    return getattr(import_module(module_name), class_name)(worker)
