"""megatron_train's strategy_config: defaults, ROLL's keys, and the settings refused with their reason."""

import torch

from roll.strategies.megatron import fusions
from roll.strategies.megatron.roll_keys import take_roll_keys
from roll.utils.logging import get_logger

logger = get_logger("roll.strategies.megatron_train")

MEGATRON_DEFAULTS = {
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "virtual_pipeline_model_parallel_size": None,
    "context_parallel_size": 1,
    "expert_model_parallel_size": 1,
    "sequence_parallel": False,
    "recompute_granularity": None,
    "use_distributed_optimizer": False,
    "overlap_grad_reduce": False,
    "overlap_param_gather": False,
    "seed": 1234,
    # MoE keys (checked against the model when it is built: roll/strategies/megatron/moe.py); null = the HF
    # config's value (num_experts_per_tok, router_aux_loss_coef), as ROLL's mcore_adapter takes them
    "moe_router_topk": None,
    "moe_grouped_gemm": False,
    "moe_token_dispatcher_type": "allgather",
    "moe_aux_loss_coeff": None,
    "moe_router_load_balancing_type": "aux_loss",
    "moe_layer_recompute": False,
    # ROLL's precision flags: checked against model_args.dtype (which sets the precision here)
    "bf16": None,
    "fp16": None,
    # megatron-core kernel fusions, passed to TransformerConfig (fusions.py: which are plain torch and which need
    # TransformerEngine/Apex, checked where the model is built)
    **dict.fromkeys(fusions.FUSION_KEYS, False),
}
PRECISION_FLAGS = {"bf16": "bfloat16", "fp16": "float16"}
MOE_KEYS = tuple(key for key in MEGATRON_DEFAULTS if key.startswith("moe_")) + ("expert_model_parallel_size",)
DISPATCHERS = ("allgather", "alltoall")
LOAD_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none")
# Model-parallel degrees that divide a role's workers before data parallelism.
MODEL_PARALLEL_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")


def resolve_megatron_config(strategy_config, world_size: int, dtype: str | None = None) -> dict:
    given = dict(strategy_config or {})
    for flag, name in PRECISION_FLAGS.items():
        value = given.get(flag)
        if value is not None and (not isinstance(value, bool) or (dtype is not None and value != (dtype == name))):
            raise ValueError(
                f"megatron strategy_config.{flag}={value!r} disagrees with model_args.dtype={dtype!r}: the dtype sets "
                f"the precision; drop {flag} or make it {dtype == name}"
            )
    for key, reason in fusions.REFUSED.items():
        if given.get(key, False) is not False:
            raise ValueError(f"megatron strategy_config.{key}={given[key]!r} is refused: {reason}; set it to false")
    take_roll_keys(given)
    unknown = sorted(set(given) - set(MEGATRON_DEFAULTS))
    if unknown:
        raise ValueError(f"megatron strategy_config has unknown keys {unknown}; valid: {sorted(MEGATRON_DEFAULTS)}")
    config = {**MEGATRON_DEFAULTS, **given}
    for key in (
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "context_parallel_size",
        "expert_model_parallel_size",
    ):
        if not isinstance(config[key], int) or config[key] < 1:
            raise ValueError(f"megatron strategy_config.{key}={config[key]!r}: expected an integer ≥ 1")
    for key in (
        "sequence_parallel",
        "use_distributed_optimizer",
        "overlap_grad_reduce",
        "overlap_param_gather",
        "moe_grouped_gemm",
        *fusions.FUSION_KEYS,
        "moe_layer_recompute",
    ):
        if not isinstance(config[key], bool):
            raise ValueError(f"megatron strategy_config.{key}={config[key]!r}: expected true or false")
    if config["recompute_granularity"] not in (None, "full", "selective"):
        raise ValueError(
            f"megatron strategy_config.recompute_granularity={config['recompute_granularity']!r}; "
            f"valid: null, 'full', 'selective'"
        )
    if config["virtual_pipeline_model_parallel_size"] not in (None, 1):
        raise ValueError(
            "megatron strategy_config.virtual_pipeline_model_parallel_size > 1 (interleaved pipeline) "
            "is not supported by roll's megatron strategy yet; set it to null"
        )
    if config["context_parallel_size"] > 1:
        raise ValueError(
            "megatron strategy_config.context_parallel_size > 1 needs TransformerEngine attention, "
            "which roll's megatron strategy does not use (local spec); set it to 1"
        )
    _check_moe_values(config)
    if config["sequence_parallel"] and config["tensor_model_parallel_size"] == 1:
        # ROLL's meaning (mcore_adapter's model config turns it off with a warning; megatron-core would refuse it):
        # ROLL's TP1 examples set it
        logger.warning(
            "megatron strategy_config.sequence_parallel=true is turned off at tensor_model_parallel_size 1, as in "
            "ROLL: it splits the sequence over the tensor-parallel ranks, and there is one"
        )
        config["sequence_parallel"] = False
    if config["overlap_param_gather"] and not config["use_distributed_optimizer"]:
        raise ValueError("megatron strategy_config.overlap_param_gather=true needs use_distributed_optimizer=true")
    model_parallel = config["tensor_model_parallel_size"] * config["pipeline_model_parallel_size"]
    if world_size % model_parallel:
        raise ValueError(
            f"megatron: world_size {world_size} is not divisible by tensor × pipeline parallel size = {model_parallel}"
        )
    # overlap_grad_reduce launches the bucket reductions as async collectives from backward hooks (no CUDA stream
    # with megatron-core 0.16.1's single distributed-optimizer instance): gloo runs it
    if not torch.cuda.is_available() and config["overlap_param_gather"]:
        raise ValueError(
            "megatron strategy_config.overlap_param_gather overlaps the parameter all-gather with the forward on "
            "CUDA; not run on a CPU-only machine — set it to false"
        )
    return config


def _check_moe_values(config: dict) -> None:
    """The MoE keys' own values; whether the model has experts (and agrees) is checked when it is built."""
    topk = config["moe_router_topk"]
    if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int) or topk < 1):
        raise ValueError(f"megatron strategy_config.moe_router_topk={topk!r}: expected null or an integer ≥ 1")
    coeff = config["moe_aux_loss_coeff"]
    if coeff is not None and (isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or coeff < 0):
        raise ValueError(f"megatron strategy_config.moe_aux_loss_coeff={coeff!r}: expected null or a number ≥ 0")
    if config["moe_token_dispatcher_type"] not in DISPATCHERS:
        raise ValueError(
            f"megatron strategy_config.moe_token_dispatcher_type={config['moe_token_dispatcher_type']!r}; "
            f"valid: {list(DISPATCHERS)} (megatron-core's 'flex' needs DeepEP, which roll does not use)"
        )
    if config["moe_router_load_balancing_type"] not in LOAD_BALANCING:
        raise ValueError(
            f"megatron strategy_config.moe_router_load_balancing_type={config['moe_router_load_balancing_type']!r}; "
            f"valid: {list(LOAD_BALANCING)}"
        )
    if config["moe_layer_recompute"] and config["recompute_granularity"] == "full":
        raise ValueError(
            "megatron strategy_config.moe_layer_recompute=true with recompute_granularity='full': full recomputation "
            "already recomputes the MoE layers (megatron-core refuses both); drop one"
        )
