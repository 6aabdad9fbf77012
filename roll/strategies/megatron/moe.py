"""megatron-core MoE settings of a converted model: the HF config's router (Qwen3-MoE: softmax top-k, renormalised
when norm_topk_prob) and strategy_config's MoE keys, checked against each other when the model is built (the
config check alone cannot know whether the model has experts).

HF Qwen3-MoE → megatron-core 0.16.1 TransformerConfig:
    num_experts                 → num_moe_experts (SequentialMLP experts of the local spec; no shared expert)
    moe_intermediate_size       → moe_ffn_hidden_size
    num_experts_per_tok         → moe_router_topk (strategy_config.moe_router_topk must agree)
    norm_topk_prob true         → moe_router_pre_softmax false: softmax over the top-k logits, which equals the
                                  full softmax's top-k renormalised; false → pre-softmax: the full softmax's
                                  top-k, not renormalised
    router_aux_loss_coef        → moe_aux_loss_coeff unless strategy_config sets it (ROLL's mcore_adapter does the
                                  same); megatron adds coeff · E · Σ_i f_i · P_i per MoE layer and micro-batch
"""

from roll.strategies.megatron.config import MEGATRON_DEFAULTS, MOE_KEYS
from roll.strategies.megatron.convert import is_moe, num_experts


def grouped_gemm_available() -> bool:
    from megatron.core.transformer.moe import grouped_gemm_util

    return grouped_gemm_util.grouped_gemm_is_available()


def _check_dense(hf_config, parallel: dict) -> None:
    changed = [key for key in MOE_KEYS if parallel.get(key, MEGATRON_DEFAULTS[key]) != MEGATRON_DEFAULTS[key]]
    if changed:
        raise ValueError(
            f"megatron strategy_config {changed} need an MoE model; {hf_config.model_type!r} is dense (MoE families: "
            "qwen3_moe); drop them"
        )


def moe_config(hf_config, parallel: dict) -> dict:
    """TransformerConfig keyword arguments for the model's experts (empty for a dense model, whose MoE keys must
    be at their defaults). Raises ValueError naming the key that the model or this machine cannot honour."""
    if not is_moe(hf_config):
        _check_dense(hf_config, parallel)
        return {}
    topk = parallel.get("moe_router_topk")
    if topk is not None and topk != hf_config.num_experts_per_tok:
        raise ValueError(
            f"megatron strategy_config.moe_router_topk={topk} disagrees with the model's num_experts_per_tok="
            f"{hf_config.num_experts_per_tok} (config.json): the converted router would not be the trained one; "
            "drop the key or make it equal"
        )
    topk = hf_config.num_experts_per_tok
    if topk == 1 and hf_config.norm_topk_prob:  # weight 1 for every token: megatron refuses a router without gradient
        raise ValueError(
            "megatron: qwen3_moe with num_experts_per_tok=1 and norm_topk_prob=true (a constant routing weight) is "
            "not supported by megatron-core's router"
        )
    experts, ep = num_experts(hf_config), parallel.get("expert_model_parallel_size", 1)
    if experts % ep:
        raise ValueError(
            f"megatron strategy_config.expert_model_parallel_size={ep} does not divide the model's "
            f"num_experts={experts}"
        )
    if parallel.get("moe_grouped_gemm") and not grouped_gemm_available():
        raise ValueError(
            "megatron strategy_config.moe_grouped_gemm=true needs megatron-core's grouped GEMM kernels (the "
            "`grouped_gemm` package, CUDA only), which are not importable here; set it to false (SequentialMLP "
            "experts: the same maths, one GEMM per expert)"
        )
    coeff = parallel.get("moe_aux_loss_coeff")
    coeff = float(hf_config.router_aux_loss_coef if coeff is None else coeff)
    balancing = parallel.get("moe_router_load_balancing_type", "aux_loss")
    if balancing == "sinkhorn" and coeff:
        raise ValueError(
            f"megatron strategy_config.moe_router_load_balancing_type='sinkhorn' takes no aux loss, but "
            f"moe_aux_loss_coeff is {coeff} (null takes the model's router_aux_loss_coef); set it to 0"
        )
    recompute = {}
    if parallel.get("moe_layer_recompute"):  # ROLL's flag = megatron-core's selective recompute of the MoE layer
        granularity = parallel.get("recompute_granularity")
        recompute = dict(
            recompute_granularity="selective",
            recompute_modules=["core_attn", "moe"] if granularity == "selective" else ["moe"],
        )
    return dict(
        num_moe_experts=experts,
        moe_ffn_hidden_size=hf_config.moe_intermediate_size,
        moe_router_topk=topk,
        moe_router_pre_softmax=not hf_config.norm_topk_prob,
        moe_router_score_function="softmax",
        moe_aux_loss_coeff=coeff,
        moe_router_load_balancing_type=balancing,
        moe_token_dispatcher_type=parallel.get("moe_token_dispatcher_type", "allgather"),
        moe_grouped_gemm=bool(parallel.get("moe_grouped_gemm")),
        expert_model_parallel_size=ep,
        **recompute,
    )


def check_moe_training(hf_config, parallel: dict, lora: bool = False) -> None:
    """What megatron_train cannot train on an MoE model: TP > 1 without sequence parallelism (megatron-core 0.16.1
    refuses it), and LoRA
    (roll's adapters are not registered as expert parameters, whose gradients megatron reduces over the
    expert-data-parallel group only)."""
    if not is_moe(hf_config):
        return
    if parallel.get("tensor_model_parallel_size", 1) > 1 and not parallel.get("sequence_parallel"):
        raise ValueError(
            "megatron_train: training an MoE model with tensor_model_parallel_size > 1 needs sequence_parallel=true "
            "(megatron-core refuses MoE + TP training without it); use tensor_model_parallel_size 1 (with "
            "expert_model_parallel_size for the experts) or enable sequence parallelism"
        )
    if lora:
        raise ValueError(
            f"megatron_train: LoRA (model_args.lora_*) on an MoE model ({hf_config.model_type}) is not supported: "
            "roll's adapters on the experts would not be reduced as expert parameters; train without LoRA"
        )
