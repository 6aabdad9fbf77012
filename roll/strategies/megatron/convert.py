"""HF ⇄ Megatron (megatron-core GPTModel, local non-TransformerEngine spec) weight conversion for the
Qwen2/Qwen2.5, Llama, Qwen3 and Qwen3-MoE families, with tensor-parallel sharding, expert-parallel expert
selection and pipeline-parallel layer offsets.

Pure tensor code (no megatron import, no process group): every function maps state dicts.

Names (HF → Megatron, layer i):
    model.embed_tokens.weight                      → embedding.word_embeddings.weight  (vocab-parallel: dim 0)
    model.layers.i.input_layernorm.weight          → decoder.layers.i.input_layernorm.weight          (replicated)
    model.layers.i.self_attn.{q,k,v}_proj.weight   → decoder.layers.i.self_attention.linear_qkv.weight (column: dim 0)
    model.layers.i.self_attn.{q,k,v}_proj.bias     → decoder.layers.i.self_attention.linear_qkv.bias   (Qwen2)
    model.layers.i.self_attn.o_proj.weight         → decoder.layers.i.self_attention.linear_proj.weight (row: dim 1)
    model.layers.i.post_attention_layernorm.weight → decoder.layers.i.pre_mlp_layernorm.weight         (replicated)
    model.layers.i.mlp.{gate,up}_proj.weight       → decoder.layers.i.mlp.linear_fc1.weight           (column: dim 0)
    model.layers.i.mlp.down_proj.weight            → decoder.layers.i.mlp.linear_fc2.weight           (row: dim 1)
    model.norm.weight                              → decoder.final_layernorm.weight
    lm_head.weight                                 → output_layer.weight (column: dim 0); absent when tied
Qwen3 / Qwen3-MoE add the per-head q/k RMSNorm (megatron's qk_layernorm; replicated):
    model.layers.i.self_attn.{q,k}_norm.weight     → decoder.layers.i.self_attention.{q,k}_layernorm.weight
Qwen3-MoE's sparse block (transformers 5 keeps the experts as 3-D tensors; e = global expert number):
    model.layers.i.mlp.gate.weight                 → decoder.layers.i.mlp.router.weight               (replicated)
    model.layers.i.mlp.experts.gate_up_proj[e]     → decoder.layers.i.mlp.experts.local_experts.e.linear_fc1.weight
    model.layers.i.mlp.experts.down_proj[e]        → decoder.layers.i.mlp.experts.local_experts.e.linear_fc2.weight
HF's gate_up_proj[e] is already [gate; up] (its forward chunks the output in two), megatron's fc1 layout.

Fused QKV layout (Megatron's): grouped by key/value head — for each of the G = num_key_value_heads groups,
its (num_heads / G) query heads, then its key head, then its value head, each head_dim rows. A TP rank
holds G / TP whole groups, so sharding is a plain split of dim 0 (needs G % TP == 0).
Fused gate/up: [gate; up] *per TP rank* (rank r holds [gate_r; up_r]), so the full tensor is not simply
split in two halves when TP > 1: `shard_tp` / `merge_tp` handle it.
The vocabulary is padded with zero rows to a multiple of TP (`padded_vocab_size`); HF export drops them.
"""

import re

import torch

SUPPORTED_MODEL_TYPES = ("qwen2", "llama", "qwen3", "qwen3_moe")
_QK_NORM_TYPES = ("qwen3", "qwen3_moe")
_MOE_TYPES = ("qwen3_moe",)

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"^(.*mlp\.experts\.local_experts\.)(\d+)\.(.+)$")
# kind of each Megatron parameter for TP sharding (experts: the same kinds over the expert-TP group)
_COLUMN = ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias")
_ROW = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight", "linear_fc2.weight")
_GATED = ("mlp.linear_fc1.weight", "linear_fc1.weight")
_VOCAB = ("embedding.word_embeddings.weight", "output_layer.weight")


def check_supported(hf_config) -> None:
    if hf_config.model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"megatron conversion: model_type {hf_config.model_type!r} is not supported; "
            f"supported: {SUPPORTED_MODEL_TYPES}"
        )
    if getattr(hf_config, "use_sliding_window", False):
        raise ValueError(
            f"megatron conversion: {hf_config.model_type} with use_sliding_window=true is not supported (megatron's "
            "local attention is full causal); set it to false in config.json"
        )
    if is_moe(hf_config):
        if hf_config.num_experts < 1:
            raise ValueError(f"megatron conversion: {hf_config.model_type} with num_experts={hf_config.num_experts}")
        if getattr(hf_config, "decoder_sparse_step", 1) != 1 or getattr(hf_config, "mlp_only_layers", None):
            raise ValueError(
                "megatron conversion: qwen3_moe with dense layers among the sparse ones (decoder_sparse_step="
                f"{hf_config.decoder_sparse_step}, mlp_only_layers={hf_config.mlp_only_layers}) is not supported; "
                "every layer must be an MoE layer (decoder_sparse_step 1, mlp_only_layers [])"
            )


def is_moe(hf_config) -> bool:
    return hf_config.model_type in _MOE_TYPES


def num_experts(hf_config) -> int:
    """Routed experts per layer (0 for a dense family)."""
    return hf_config.num_experts if is_moe(hf_config) else 0


def has_qk_norm(hf_config) -> bool:
    return hf_config.model_type in _QK_NORM_TYPES


def head_dim(hf_config) -> int:
    return getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads


def num_kv_heads(hf_config) -> int:
    return getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads


def has_qkv_bias(hf_config) -> bool:
    return hf_config.model_type == "qwen2" or bool(getattr(hf_config, "attention_bias", False))


def padded_vocab_size(hf_config, tp_size: int) -> int:
    return -(-hf_config.vocab_size // tp_size) * tp_size


def tied(hf_config) -> bool:
    return bool(getattr(hf_config, "tie_word_embeddings", False))


def _mlp_names(hf_config) -> list[str]:
    if is_moe(hf_config):
        return ["mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    return ["mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]


def hf_parameter_names(hf_config) -> set:
    """The HF parameter names hf_to_mcore reads (lm_head only when untied)."""
    names = {"model.embed_tokens.weight", "model.norm.weight"} | (set() if tied(hf_config) else {"lm_head.weight"})
    per_layer = ["input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.o_proj.weight"]
    per_layer += _mlp_names(hf_config)
    per_layer += [
        f"self_attn.{p}_proj.{s}"
        for p in "qkv"
        for s in (("weight", "bias") if has_qkv_bias(hf_config) else ("weight",))
    ]
    per_layer += ["self_attn.q_norm.weight", "self_attn.k_norm.weight"] if has_qk_norm(hf_config) else []
    for i in range(hf_config.num_hidden_layers):
        names |= {f"model.layers.{i}.{name}" for name in per_layer}
    return names


def _mlp_to_mcore(hf_state: dict, hf_config, src: str, dst: str, out: dict) -> None:
    if not is_moe(hf_config):
        out[dst + "mlp.linear_fc1.weight"] = torch.cat(
            [hf_state[src + "mlp.gate_proj.weight"], hf_state[src + "mlp.up_proj.weight"]]
        )
        out[dst + "mlp.linear_fc2.weight"] = hf_state[src + "mlp.down_proj.weight"].clone()
        return
    out[dst + "mlp.router.weight"] = hf_state[src + "mlp.gate.weight"].clone()
    gate_up, down = hf_state[src + "mlp.experts.gate_up_proj"], hf_state[src + "mlp.experts.down_proj"]
    for e in range(num_experts(hf_config)):
        out[dst + f"mlp.experts.local_experts.{e}.linear_fc1.weight"] = gate_up[e].clone()
        out[dst + f"mlp.experts.local_experts.{e}.linear_fc2.weight"] = down[e].clone()


def _mlp_to_hf(mcore_state: dict, hf_config, src: str, dst: str, out: dict) -> None:
    if not is_moe(hf_config):
        gate, up = mcore_state[src + "mlp.linear_fc1.weight"].chunk(2)
        out[dst + "mlp.gate_proj.weight"], out[dst + "mlp.up_proj.weight"] = gate.clone(), up.clone()
        out[dst + "mlp.down_proj.weight"] = mcore_state[src + "mlp.linear_fc2.weight"].clone()
        return
    experts = range(num_experts(hf_config))
    out[dst + "mlp.gate.weight"] = mcore_state[src + "mlp.router.weight"].clone()
    for name, fc in (("gate_up_proj", "linear_fc1"), ("down_proj", "linear_fc2")):
        parts = [mcore_state[src + f"mlp.experts.local_experts.{e}.{fc}.weight"] for e in experts]
        out[dst + f"mlp.experts.{name}"] = torch.stack(parts)


# --- full (unsharded) model ----------------------------------------------------------------------------------
def hf_to_mcore(hf_state: dict, hf_config, tp_size: int = 1) -> dict:
    """HF state dict → full Megatron state dict (global layer and expert numbers, vocab padded for `tp_size`)."""
    check_supported(hf_config)
    heads, groups, dim = hf_config.num_attention_heads, num_kv_heads(hf_config), head_dim(hf_config)
    per_group = heads // groups
    vocab, padded = hf_config.vocab_size, padded_vocab_size(hf_config, tp_size)

    def pad(weight):
        if padded == vocab:
            return weight.clone()
        return torch.cat([weight, weight.new_zeros(padded - vocab, *weight.shape[1:])])

    out = {
        "embedding.word_embeddings.weight": pad(hf_state["model.embed_tokens.weight"]),
        "decoder.final_layernorm.weight": hf_state["model.norm.weight"].clone(),
    }
    if not tied(hf_config):
        out["output_layer.weight"] = pad(hf_state["lm_head.weight"])
    for i in range(hf_config.num_hidden_layers):
        src, dst = f"model.layers.{i}.", f"decoder.layers.{i}."
        out[dst + "input_layernorm.weight"] = hf_state[src + "input_layernorm.weight"].clone()
        out[dst + "pre_mlp_layernorm.weight"] = hf_state[src + "post_attention_layernorm.weight"].clone()
        for suffix in ("weight", "bias") if has_qkv_bias(hf_config) else ("weight",):
            q = hf_state[src + f"self_attn.q_proj.{suffix}"]
            k = hf_state[src + f"self_attn.k_proj.{suffix}"]
            v = hf_state[src + f"self_attn.v_proj.{suffix}"]
            rest = q.shape[1:]
            fused = torch.cat(
                [
                    q.reshape(groups, per_group * dim, *rest),
                    k.reshape(groups, dim, *rest),
                    v.reshape(groups, dim, *rest),
                ],
                dim=1,
            )
            out[dst + f"self_attention.linear_qkv.{suffix}"] = fused.reshape(-1, *rest).clone()
        out[dst + "self_attention.linear_proj.weight"] = hf_state[src + "self_attn.o_proj.weight"].clone()
        if has_qk_norm(hf_config):
            for p in "qk":
                out[dst + f"self_attention.{p}_layernorm.weight"] = hf_state[src + f"self_attn.{p}_norm.weight"].clone()
        _mlp_to_mcore(hf_state, hf_config, src, dst, out)
    return out


def mcore_to_hf(mcore_state: dict, hf_config) -> dict:
    """Full Megatron state dict → HF state dict (padding rows dropped; lm_head omitted when tied)."""
    check_supported(hf_config)
    heads, groups, dim = hf_config.num_attention_heads, num_kv_heads(hf_config), head_dim(hf_config)
    per_group = heads // groups
    vocab = hf_config.vocab_size
    out = {
        "model.embed_tokens.weight": mcore_state["embedding.word_embeddings.weight"][:vocab].clone(),
        "model.norm.weight": mcore_state["decoder.final_layernorm.weight"].clone(),
    }
    if not tied(hf_config):
        out["lm_head.weight"] = mcore_state["output_layer.weight"][:vocab].clone()
    for i in range(hf_config.num_hidden_layers):
        src, dst = f"decoder.layers.{i}.", f"model.layers.{i}."
        out[dst + "input_layernorm.weight"] = mcore_state[src + "input_layernorm.weight"].clone()
        out[dst + "post_attention_layernorm.weight"] = mcore_state[src + "pre_mlp_layernorm.weight"].clone()
        for suffix in ("weight", "bias") if has_qkv_bias(hf_config) else ("weight",):
            fused = mcore_state[src + f"self_attention.linear_qkv.{suffix}"]
            rest = fused.shape[1:]
            q, k, v = fused.reshape(groups, (per_group + 2) * dim, *rest).split([per_group * dim, dim, dim], dim=1)
            out[dst + f"self_attn.q_proj.{suffix}"] = q.reshape(-1, *rest).clone()
            out[dst + f"self_attn.k_proj.{suffix}"] = k.reshape(-1, *rest).clone()
            out[dst + f"self_attn.v_proj.{suffix}"] = v.reshape(-1, *rest).clone()
        out[dst + "self_attn.o_proj.weight"] = mcore_state[src + "self_attention.linear_proj.weight"].clone()
        if has_qk_norm(hf_config):
            for p in "qk":
                out[dst + f"self_attn.{p}_norm.weight"] = mcore_state[
                    src + f"self_attention.{p}_layernorm.weight"
                ].clone()
        _mlp_to_hf(mcore_state, hf_config, src, dst, out)
    return out


# --- tensor parallelism -------------------------------------------------------------------------------------
def _kind(name: str) -> str:
    match = _EXPERT.match(name) or _LAYER.match(name)
    suffix = match.group(match.lastindex) if match else name
    if suffix in _COLUMN or suffix in _VOCAB:
        return "column"
    if suffix in _ROW:
        return "row"
    if suffix in _GATED:
        return "gated"
    return "replicated"


def shard_tp(full: dict, tp_size: int, tp_rank: int) -> dict:
    """This TP rank's slice of a full Megatron state dict (ColumnParallel and vocab-parallel: dim 0;
    RowParallel: dim 1; fused gate/up: each half split on dim 0; norms replicated)."""
    out = {}
    for name, tensor in full.items():
        kind = _kind(name)
        if tp_size == 1 or kind == "replicated":
            out[name] = tensor.clone()
        elif kind == "column":
            out[name] = tensor.chunk(tp_size, dim=0)[tp_rank].clone()
        elif kind == "row":
            out[name] = tensor.chunk(tp_size, dim=1)[tp_rank].clone()
        else:
            gate, up = tensor.chunk(2, dim=0)
            out[name] = torch.cat([gate.chunk(tp_size)[tp_rank], up.chunk(tp_size)[tp_rank]])
        if kind != "replicated" and tp_size > 1:
            dim = 1 if kind == "row" else 0
            if tensor.shape[dim] % tp_size:
                raise ValueError(f"{name}: dim {dim} of {tuple(tensor.shape)} is not divisible by TP={tp_size}")
    return out


def merge_tp(shards: list[dict]) -> dict:
    """Inverse of shard_tp: the TP ranks' state dicts (in rank order) → the full one."""
    tp_size = len(shards)
    out = {}
    for name in shards[0]:
        parts = [shard[name] for shard in shards]
        kind = _kind(name)
        if tp_size == 1 or kind == "replicated":
            out[name] = parts[0].clone()
        elif kind == "column":
            out[name] = torch.cat(parts, dim=0)
        elif kind == "row":
            out[name] = torch.cat(parts, dim=1)
        else:
            halves = [part.chunk(2) for part in parts]
            out[name] = torch.cat([h[0] for h in halves] + [h[1] for h in halves])
    return out


def tp_split_dim(name: str) -> int | None:
    """The dim a TP-sharded Megatron parameter is split along (None = replicated; fc1 is 'gated' on 0)."""
    kind = _kind(name)
    return None if kind == "replicated" else (1 if kind == "row" else 0)


# --- pipeline parallelism -----------------------------------------------------------------------------------
def layer_offset(num_layers: int, pp_size: int, pp_rank: int) -> tuple[int, int]:
    """(first global layer, number of layers) of a pipeline stage (even split, as megatron-core's default)."""
    if num_layers % pp_size:
        raise ValueError(f"num_hidden_layers={num_layers} is not divisible by pipeline_model_parallel_size={pp_size}")
    per_stage = num_layers // pp_size
    return pp_rank * per_stage, per_stage


def select_pp(full: dict, num_layers: int, pp_size: int, pp_rank: int, tied_embeddings: bool = False) -> dict:
    """The entries of one pipeline stage with stage-local layer numbers: embeddings on the first stage,
    final norm and output layer on the last (with tied embeddings and PP > 1 the last stage holds its own
    copy of the embedding as output_layer.weight, kept equal by megatron's embedding-group all-reduce)."""
    first, count = layer_offset(num_layers, pp_size, pp_rank)
    out = {}
    for name, tensor in full.items():
        match = _LAYER.match(name)
        if match:
            index = int(match.group(1))
            if first <= index < first + count:
                out[f"decoder.layers.{index - first}.{match.group(2)}"] = tensor
        elif name.startswith("embedding.") and pp_rank == 0:
            out[name] = tensor
        elif (name.startswith("decoder.final_layernorm") or name.startswith("output_layer")) and pp_rank == pp_size - 1:
            out[name] = tensor
    if tied_embeddings and pp_size > 1 and pp_rank == pp_size - 1:
        out["output_layer.weight"] = full["embedding.word_embeddings.weight"]
    return out


def globalize_pp(stage: dict, num_layers: int, pp_size: int, pp_rank: int) -> dict:
    """Stage-local layer numbers → global ones (inverse of select_pp's renumbering)."""
    first, _ = layer_offset(num_layers, pp_size, pp_rank)
    out = {}
    for name, tensor in stage.items():
        match = _LAYER.match(name)
        out[f"decoder.layers.{int(match.group(1)) + first}.{match.group(2)}" if match else name] = tensor
    return out


# --- expert parallelism -------------------------------------------------------------------------------------
def expert_range(total_experts: int, ep_size: int, ep_rank: int) -> tuple[int, int]:
    """(first global expert, number of experts) held by an expert-parallel rank (megatron's even split)."""
    if total_experts % ep_size:
        raise ValueError(f"num_experts={total_experts} is not divisible by expert_model_parallel_size={ep_size}")
    per_rank = total_experts // ep_size
    return ep_rank * per_rank, per_rank


def select_ep(full: dict, total_experts: int, ep_size: int, ep_rank: int) -> dict:
    """An expert-parallel rank's entries: its experts renumbered from 0, every non-expert tensor."""
    first, count = expert_range(total_experts, ep_size, ep_rank) if total_experts else (0, 0)
    out = {}
    for name, tensor in full.items():
        match = _EXPERT.match(name)
        if not match:
            out[name] = tensor
        elif first <= int(match.group(2)) < first + count:
            out[f"{match.group(1)}{int(match.group(2)) - first}.{match.group(3)}"] = tensor
    return out


def globalize_ep(local: dict, total_experts: int, ep_size: int, ep_rank: int) -> dict:
    """Local expert numbers → global ones (inverse of select_ep's renumbering)."""
    first, _ = expert_range(total_experts, ep_size, ep_rank) if total_experts else (0, 0)
    out = {}
    for name, tensor in local.items():
        match = _EXPERT.match(name)
        out[f"{match.group(1)}{int(match.group(2)) + first}.{match.group(3)}" if match else name] = tensor
    return out


def is_expert_parameter(name: str) -> bool:
    return _EXPERT.match(name) is not None
