"""megatron-core GPTModel (local, non-TransformerEngine spec) built from an HF config, and its forward.

Needs `megatron.core.parallel_state` initialised. Kernel fusions are the strategy_config's (fusions.py; off by
default) and initialisation is on the CPU so the same code runs without CUDA (with roll.platforms.megatron_cpu
applied).
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from roll.strategies.megatron import convert, fusions
from roll.strategies.megatron.moe import moe_config


def transformer_config(hf_config, parallel: dict, params_dtype=torch.float32, where: str = "megatron strategy_config"):
    """`parallel`: the resolved strategy_config (config.resolve_megatron_config); `where` names it in errors."""
    from megatron.core.transformer import TransformerConfig

    convert.check_supported(hf_config)
    fusions.check_kernels(parallel, where=where)
    on_gpu = torch.cuda.is_available()
    recompute = parallel.get("recompute_granularity")
    kwargs = dict(
        num_layers=hf_config.num_hidden_layers,
        hidden_size=hf_config.hidden_size,
        num_attention_heads=hf_config.num_attention_heads,
        num_query_groups=convert.num_kv_heads(hf_config),
        kv_channels=convert.head_dim(hf_config),
        ffn_hidden_size=hf_config.intermediate_size,
        normalization="RMSNorm",
        layernorm_epsilon=hf_config.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=convert.has_qkv_bias(hf_config),
        qk_layernorm=convert.has_qk_norm(hf_config),
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=getattr(hf_config, "initializer_range", 0.02),
        tensor_model_parallel_size=parallel.get("tensor_model_parallel_size", 1),
        pipeline_model_parallel_size=parallel.get("pipeline_model_parallel_size", 1),
        sequence_parallel=parallel.get("sequence_parallel", False),
        params_dtype=params_dtype,
        pipeline_dtype=params_dtype,
        bf16=params_dtype == torch.bfloat16,
        fp16=params_dtype == torch.float16,
        attention_softmax_in_fp32=True,
        use_cpu_initialization=not on_gpu,
        perform_initialization=False,
        **{key: bool(parallel.get(key, False)) for key in fusions.FUSION_KEYS},
        masked_softmax_fusion=False,  # refused (fusions.REFUSED)
        persist_layer_norm=False,
        recompute_granularity=recompute,
        recompute_method="uniform" if recompute == "full" else None,
        recompute_num_layers=1 if recompute == "full" else None,
    )
    kwargs.update(moe_config(hf_config, parallel))  # experts, router, dispatcher; moe_layer_recompute
    return TransformerConfig(**kwargs)


class RMSNorm(torch.nn.Module):
    """The norm in every norm slot of roll's model: HF's Qwen2/Llama/Qwen3 RMSNorm maths (statistics in float32, the
    weight applied in the input dtype: bit-identical to HF in float32 and bf16; megatron-core's WrappedTorchNorm,
    torch.nn.RMSNorm, differs from HF in bf16). Under sequence parallelism each TP rank normalises its own part of
    the sequence, so its weight gradient is partial: the weight carries megatron's `sequence_parallel` tag (as
    FusedLayerNorm/TENorm do), and finalize_model_grads sums it over the tensor-parallel group."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-6, **_):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.weight.sequence_parallel = config.sequence_parallel
        self.eps = eps

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        dtype = hidden.dtype
        hidden = hidden.float()
        hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * hidden.to(dtype)


def block_spec(config):
    """megatron-core's local layer spec with RMSNorm (above) in its norm slots, and the final norm (which
    megatron-core would otherwise pick by what is installed: TENorm, Apex's LayerNorm-only FusedLayerNorm, or
    WrappedTorchNorm, which refuses sequence parallelism)."""
    import dataclasses

    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.identity_op import IdentityOp
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

    layer = get_gpt_layer_local_spec(
        num_experts=config.num_moe_experts,
        moe_grouped_gemm=config.moe_grouped_gemm,
        qk_layernorm=config.qk_layernorm,
        normalization="RMSNorm",
    )
    attention = layer.submodules.self_attention
    norms = {
        key: RMSNorm
        for key in ("q_layernorm", "k_layernorm")
        if getattr(attention.submodules, key) is not IdentityOp  # q/k norms (qk_layernorm) only
    }
    attention = dataclasses.replace(attention, submodules=dataclasses.replace(attention.submodules, **norms))
    submodules = dataclasses.replace(
        layer.submodules, input_layernorm=RMSNorm, pre_mlp_layernorm=RMSNorm, self_attention=attention
    )
    layer = dataclasses.replace(layer, submodules=submodules)
    layers = get_num_layers_to_build(config)  # this pipeline stage's
    return TransformerBlockSubmodules(layer_specs=[layer] * layers, layer_norm=RMSNorm)


def build_gpt_model(hf_config, config, tp_size: int, pre_process: bool = True, post_process: bool = True):
    from megatron.core.models.gpt import GPTModel

    rope = getattr(hf_config, "rope_theta", None)
    if rope is None:
        rope = (getattr(hf_config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    scaling = getattr(hf_config, "rope_scaling", None)
    if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
        raise ValueError(f"megatron conversion: rope_scaling {scaling} is not supported")
    model = GPTModel(
        config=config,
        transformer_layer_spec=block_spec(config),
        vocab_size=convert.padded_vocab_size(hf_config, tp_size),
        max_sequence_length=hf_config.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        parallel_output=False,
        share_embeddings_and_output_weights=convert.tied(hf_config),
        position_embedding_type="rope",
        rotary_base=int(rope),
    )
    mark_tensor_parallel(model)
    return model


def mark_tensor_parallel(model) -> None:
    """With perform_initialization=False (weights come from the converter) megatron-core 0.16.1 skips the
    call that tags TP-sharded weights (`tensor_model_parallel`, `partition_dim`): untagged, they count as
    TP duplicates and the clip-grad norm leaves them out. Tag them from the converter's layout."""
    from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

    for name, param in model.named_parameters():
        dim = convert.tp_split_dim(name)
        if dim is not None and not getattr(param, "tensor_model_parallel", False):
            set_tensor_model_parallel_attributes(param, True, dim, 1)


def attention_mask(mask: torch.Tensor) -> torch.Tensor:
    """(B, S) 1/0 padding mask → megatron's boolean (B, 1, S, S) mask, True = not attended (causal +
    padded keys). Padded query rows attend nowhere; their outputs are never read."""
    length = mask.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=mask.device).tril()
    allowed = causal[None] & mask.bool()[:, None, :]
    return ~allowed[:, None]


def pad_sequence(tensor: torch.Tensor, multiple: int) -> torch.Tensor:
    """Right-pads dim 1 ((B, S) ids, positions or 1/0 mask) with zeros to a multiple of `multiple`: sequence
    parallelism splits the sequence evenly over the TP ranks. Zero mask = padded keys; in a packed row a zero
    position starts a new row of its own (packed_attention_mask), so real tokens never attend to the padding.
    The model's outputs at the added columns are cut off by the caller."""
    extra = -tensor.shape[1] % multiple
    return F.pad(tensor, (0, extra)) if extra else tensor


def packed_attention_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """(1, N) position ids of packed rows (each restarting at 0, batching.pack) → megatron's boolean
    (1, 1, N, N) mask, True = not attended: causal within a row, nothing across rows. RoPE needs no per-row
    positions: megatron rotates by the packed index, and q·k under RoPE depends only on the distance within
    a row, which packing keeps."""
    segment = (position_ids[0] == 0).long().cumsum(dim=0)
    length = segment.shape[0]
    causal = torch.ones(length, length, dtype=torch.bool, device=position_ids.device).tril()
    allowed = causal & (segment[:, None] == segment[None, :])
    return ~allowed[None, None]


def unpack(packed: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(1, N, V) outputs of a packed row → (rows, S, V), zeros at padding positions (differentiable)."""
    mask = attention_mask.bool()
    out = packed.new_zeros(*mask.shape, packed.shape[-1])
    out[mask] = packed[0]
    return out


def load_into(model, state: dict, only=None) -> None:
    """Copy a (TP/PP-local) Megatron state dict into the model; every parameter (whose name passes `only`) must
    be covered."""
    own = {k: v for k, v in model.state_dict().items() if not k.endswith("_extra_state") and (only is None or only(k))}
    unknown, missing = sorted(set(state) - set(own)), sorted(set(own) - set(state))
    if unknown or missing:
        raise KeyError(f"megatron weights do not match the model: unknown {unknown[:4]}, missing {missing[:4]}")
    with torch.no_grad():
        for name, tensor in state.items():
            if own[name].shape != tensor.shape:
                raise ValueError(f"{name}: model shape {tuple(own[name].shape)} ≠ weights {tuple(tensor.shape)}")
            own[name].copy_(tensor)


def init_megatron(parallel: dict) -> None:
    """Process group (gloo on CPU), the CPU compatibility layer, megatron's model-parallel groups and RNG."""
    from roll.platforms import megatron_cpu

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    megatron_cpu.apply()
    from megatron.core import parallel_state, tensor_parallel

    shape = (
        parallel["tensor_model_parallel_size"],
        parallel["pipeline_model_parallel_size"],
        parallel.get("expert_model_parallel_size", 1),
    )
    if parallel_state.model_parallel_is_initialized():
        current = (
            parallel_state.get_tensor_model_parallel_world_size(),
            parallel_state.get_pipeline_model_parallel_world_size(),
            parallel_state.get_expert_model_parallel_world_size(),
        )
        if current != shape:
            raise RuntimeError(
                f"megatron parallel state already initialised as TP×PP×EP={current}, asked for {shape}: "
                f"one parallel layout per process"
            )
    else:
        parallel_state.initialize_model_parallel(shape[0], shape[1], expert_model_parallel_size=shape[2])
    tensor_parallel.model_parallel_cuda_manual_seed(parallel["seed"])
