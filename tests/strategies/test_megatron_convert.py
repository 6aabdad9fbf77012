"""HF ⇄ Megatron weight conversion (roll/strategies/megatron/convert.py) and the CPU compatibility layer
(roll/platforms/megatron_cpu.py) for megatron-core 0.16.1. Requires the `megatron` extra for the parts
that build a GPTModel; the pure conversion tests need only torch + transformers.

Tolerances: round trips are exact (bit-identical tensors). Logits of the converted GPTModel vs HF, float32,
on a left-padded batch at every non-padded position: max |Δ| < 1e-5 (observed ≈ 2e-7 at TP1 and TP2).
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from roll.strategies.megatron import convert
from tests.strategies import megatron_scenarios as ms

LOGITS_ATOL = 1e-5


def _qwen2(kv_heads=2, heads=2, tied=False, vocab=263, layers=2):
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        tie_word_embeddings=tied,
        max_position_embeddings=64,
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # non-zero biases and norms so every tensor's placement is checked
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return model


def _llama():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=260,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


def _hf_state(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


MODELS = {
    "qwen2": lambda: _qwen2(),
    "qwen2_gqa_kv1": lambda: _qwen2(kv_heads=1, heads=4),
    "qwen2_gqa_4q2kv": lambda: _qwen2(kv_heads=2, heads=4),
    "qwen2_tied": lambda: _qwen2(tied=True),
    "llama_gqa": _llama,
}


# every model at TP1 and TP2, except one key/value head at TP2 (megatron needs num_query_groups % TP == 0)
ROUND_TRIPS = [(name, tp) for name in MODELS for tp in (1, 2) if not (name == "qwen2_gqa_kv1" and tp == 2)]


@pytest.mark.parametrize("name,tp", ROUND_TRIPS)
def test_hf_megatron_hf_round_trip_is_exact(name, tp):
    model = MODELS[name]()
    config, hf = model.config, _hf_state(model)
    full = convert.hf_to_mcore(hf, config, tp)
    shards = [convert.shard_tp(full, tp, rank) for rank in range(tp)]
    merged = convert.merge_tp(shards)
    assert merged.keys() == full.keys()
    assert all(torch.equal(merged[k], full[k]) for k in full)
    back = convert.mcore_to_hf(merged, config)
    assert back.keys() == hf.keys() == convert.hf_parameter_names(config)
    assert all(torch.equal(back[k], hf[k]) for k in hf)
    # shapes a TP rank's GPTModel expects
    padded = convert.padded_vocab_size(config, tp)
    assert shards[0]["embedding.word_embeddings.weight"].shape == (padded // tp, config.hidden_size)
    qkv = (config.num_attention_heads + 2 * convert.num_kv_heads(config)) * convert.head_dim(config)
    assert shards[0]["decoder.layers.0.self_attention.linear_qkv.weight"].shape == (qkv // tp, config.hidden_size)
    assert shards[0]["decoder.layers.0.self_attention.linear_proj.weight"].shape == (
        config.hidden_size,
        config.num_attention_heads * convert.head_dim(config) // tp,
    )
    assert shards[0]["decoder.layers.0.mlp.linear_fc2.weight"].shape == (
        config.hidden_size,
        config.intermediate_size // tp,
    )
    assert ("output_layer.weight" in full) != config.tie_word_embeddings
    assert ("decoder.layers.0.self_attention.linear_qkv.bias" in full) == (config.model_type == "qwen2")


def test_fused_layouts_are_megatrons():
    """QKV grouped per key/value head ([q of the group, k, v]); fc1 on a TP rank = [gate_r; up_r]."""
    model = _qwen2(kv_heads=2, heads=4)
    config, hf = model.config, _hf_state(model)
    d = convert.head_dim(config)
    fused = convert.hf_to_mcore(hf, config)["decoder.layers.0.self_attention.linear_qkv.weight"]
    q, k, v = (hf[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv")
    group1 = fused[4 * d : 8 * d]  # 2 query heads + k + v per group
    assert torch.equal(group1[: 2 * d], q[2 * d : 4 * d])
    assert torch.equal(group1[2 * d : 3 * d], k[d : 2 * d]) and torch.equal(group1[3 * d :], v[d : 2 * d])
    shard = convert.shard_tp(convert.hf_to_mcore(hf, config, 2), 2, 1)["decoder.layers.0.mlp.linear_fc1.weight"]
    gate, up = hf["model.layers.0.mlp.gate_proj.weight"], hf["model.layers.0.mlp.up_proj.weight"]
    assert torch.equal(shard, torch.cat([gate[64:], up[64:]]))


def test_pipeline_stages_renumber_layers_and_place_embeddings():
    model = _qwen2(layers=4)
    full = convert.hf_to_mcore(_hf_state(model), model.config)
    first, last = (convert.select_pp(full, 4, 2, rank) for rank in (0, 1))
    assert "embedding.word_embeddings.weight" in first and "output_layer.weight" not in first
    assert "decoder.final_layernorm.weight" in last and "embedding.word_embeddings.weight" not in last
    assert torch.equal(last["decoder.layers.0.mlp.linear_fc2.weight"], full["decoder.layers.2.mlp.linear_fc2.weight"])
    merged = {**convert.globalize_pp(first, 4, 2, 0), **convert.globalize_pp(last, 4, 2, 1)}
    assert merged.keys() == full.keys() and all(torch.equal(merged[k], full[k]) for k in full)
    with pytest.raises(ValueError, match="not divisible"):
        convert.layer_offset(4, 3, 0)


def test_unsupported_model_type_is_refused():
    config = Qwen2Config()
    config.model_type = "mixtral"
    with pytest.raises(ValueError, match="not supported"):
        convert.hf_to_mcore({}, config)


# --- with megatron-core ---------------------------------------------------------------------------------
def test_cpu_layer_refuses_other_megatron_versions(monkeypatch):
    ms.require_megatron()
    if torch.cuda.is_available():
        pytest.skip("the CPU layer is inactive on a CUDA machine")
    from megatron.core import package_info

    from roll.platforms import megatron_cpu

    monkeypatch.setattr(package_info, "__version__", "0.17.0")
    monkeypatch.setattr(megatron_cpu, "_applied", False)
    with pytest.raises(RuntimeError, match="pinned to megatron-core 0.16.1"):
        megatron_cpu.apply()


# sequence parallelism at TP2: Qwen2 (q/k/v biases) and Llama (GQA, no biases), on an odd-length batch
SEQUENCE_PARALLEL = ("qwen2_tied", "llama_gqa")


def logits_scenarios(workdir) -> list[dict]:
    """One `logits` scenario per model and tensor-parallel size (the models are saved into `workdir`); they run
    in the session's one megatron launch (conftest.py)."""
    models = {
        "qwen2": _qwen2(vocab=262),
        "qwen2_gqa_4q2kv": _qwen2(kv_heads=2, heads=4),
        "qwen2_gqa_kv1": _qwen2(kv_heads=1, heads=4),
        "qwen2_tied": _qwen2(tied=True),
        "llama_gqa": _llama(),
    }
    scenarios = []
    for name, model in models.items():
        model.save_pretrained(workdir / name)
        for tp in (1, 2):
            if convert.num_kv_heads(model.config) % tp == 0:
                scenarios.append(dict(name=f"{name}/tp{tp}", logits=True, tp=tp, model_dir=str(workdir / name)))
    for name in SEQUENCE_PARALLEL:
        scenarios.append(dict(name=f"{name}/tp2_sp", logits=True, tp=2, sp=True, model_dir=str(workdir / name)))
    return scenarios


@pytest.fixture(scope="module")
def logits_runs(megatron_runs):
    return megatron_runs["results"]


@pytest.mark.parametrize(
    "name",
    [
        "qwen2/tp1",
        "qwen2/tp2",
        "qwen2_gqa_4q2kv/tp1",
        "qwen2_gqa_4q2kv/tp2",
        "qwen2_gqa_kv1/tp1",
        "qwen2_tied/tp1",
        "qwen2_tied/tp2",
        "llama_gqa/tp2",
        *(f"{name}/tp2_sp" for name in SEQUENCE_PARALLEL),
    ],
)
def test_converted_gpt_model_logits_match_hf(logits_runs, name):
    """(tp2_sp: sequence parallelism — the sequence split over the TP ranks between the layers' TP regions, the
    13 columns padded to 14 — at the same tolerance: the same maths, the all-reduce in another order)"""
    result = logits_runs[name]
    assert result["tp"] == int(name.split("/")[1][2])
    sp = name.endswith("_sp")  # the layer norms' and the final norm's weights are tagged for the TP gradient sum
    assert result["sp"] == sp and len(result["norms"]) == 5 and set(result["norms"]) == {sp}
    mask = result["mask"].bool()
    assert result["got"].shape == result["want"].shape
    assert (result["got"] - result["want"]).abs()[mask].max().item() < LOGITS_ATOL
