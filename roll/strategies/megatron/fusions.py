"""megatron-core 0.16.1's kernel-fusion flags under roll's local (non-TransformerEngine) layer spec, as read
from its source: which are plain torch, which need a compiled kernel (checked where the model is built), and
which cannot work with roll's model at all (refused when the config is read)."""

import importlib.util

# Plain torch (functions compiled by megatron.core.jit's torch.compile): passed to TransformerConfig.
#   bias_activation_fusion: mlp.py → fusions.fused_bias_swiglu (SwiGLU with its hand-written backward; without
#     an MLP bias, as in Qwen2/Llama, the bias-free SwiGLUFunction).
#   bias_dropout_fusion: transformer_layer.py → fusions.fused_bias_dropout (residual + dropout + bias).
TORCH_FUSIONS = ("bias_activation_fusion", "bias_dropout_fusion")

# Need a kernel that is not part of megatron-core: accepted by the loader (a GPU node with it runs the config),
# checked by check_kernels before the model is built. key: what it needs.
KERNEL_FUSIONS = {
    # rope_utils takes fused_apply_rotary_pos_emb(_thd) from TransformerEngine; TransformerConfig refuses the
    # flag when both are missing
    "apply_rope_fusion": "TransformerEngine >= 1.4 (megatron-core's fused RoPE is TransformerEngine's)",
    # tensor_parallel/layers.py imports fused_weight_gradient_mlp_cuda for the local spec's linears
    "gradient_accumulation_fusion": (
        "Apex built with --cpp_ext --cuda_ext (megatron-core's local linears import its "
        "fused_weight_gradient_mlp_cuda module)"
    ),
}

# Refused when the config is read: no installed kernel makes them work with roll's model.
REFUSED = {
    "persist_layer_norm": (
        "Qwen2/Llama use RMSNorm: roll's norm (HF's RMSNorm maths, model.RMSNorm) has no persistent kernel, "
        "and Apex's persistent kernel (FusedLayerNorm) is LayerNorm only"
    ),
    "masked_softmax_fusion": (
        "in bf16/fp16, megatron-core's fused causal softmax (the local spec's attention is causal) applies a plain "
        "causal mask and ignores the attention mask roll passes, so padded and packed rows would attend across "
        "their padding and neighbours"
    ),
}

FUSION_KEYS = TORCH_FUSIONS + tuple(KERNEL_FUSIONS)


def _rope_kernel_available() -> bool:
    from megatron.core.models.common.embeddings import rope_utils

    return rope_utils.fused_apply_rotary_pos_emb is not None or rope_utils.fused_apply_rotary_pos_emb_thd is not None


def _kernel_available(key: str) -> bool:
    if key == "apply_rope_fusion":
        return _rope_kernel_available()
    return importlib.util.find_spec("fused_weight_gradient_mlp_cuda") is not None


def check_kernels(parallel: dict, where: str = "megatron strategy_config", available=_kernel_available) -> None:
    """Raises RuntimeError for a kernel fusion that is on in `parallel` (resolved strategy_config, named `where`
    in the message) while its kernel cannot be imported here: a flag is never turned off behind the user's back."""
    missing = [key for key in KERNEL_FUSIONS if parallel.get(key) and not available(key)]
    if missing:
        raise RuntimeError(
            "; ".join(
                f"{where}.{key}=true needs {KERNEL_FUSIONS[key]}, which is not importable on this "
                f"machine; install it or set {key}: false"
                for key in missing
            )
        )
