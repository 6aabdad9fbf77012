"""The Qwen3 and Qwen3-MoE families in megatron_train / megatron_infer (megatron-core 0.16.1, local spec; the
`megatron` extra): HF ⇄ Megatron conversion (q/k norm, router, SequentialMLP experts, TP and EP sharding), the
converted model's logits against HF's, the MoE strategy_config keys, and MoE training on 2 gloo ranks.

Models: tiny random Qwen3 / Qwen3-MoE (hidden 64, 2 layers, head_dim 32 ≠ hidden/heads, 4 experts of width 32,
top-2), weights perturbed so every norm is non-trivial. Training: the harness's 3 PPO steps (AdamW, warm-up,
clipping that binds) from the MoE checkpoint against the plain HF loop over the same global batch; with
moe_aux_loss_coeff > 0 the reference adds megatron-core's Switch load-balancing term per layer and micro-batch
(E · Σ_i f_i · P_i: f_i the share of top-k slots routed to expert i, P_i the mean router probability, over the
non-padding tokens, which megatron_train passes as megatron's padding_mask), taken from HF's router logits.
Tolerances as tests/strategies/test_megatron_train.py (float32), except NO_AUX_* below.
"""

import pytest
import torch
from transformers import AutoConfig, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

from roll.strategies.megatron import convert
from tests.strategies import harness as h
from tests.strategies import megatron_scenarios as ms
from tests.strategies.test_train_strategies import LOSS_KEYS, _assert_steps_close, _max_param_diff

LOGITS_ATOL, LOSS_RTOL, LOSS_ATOL, PARAM_ATOL = 1e-5, 1e-5, 1e-6, 2e-5
# Without the aux loss some attention gradients are tiny (layer 1's k_proj, behind the per-head k RMSNorm) and Adam
# scales their float-rounding differences up to whole update steps: observed 4.1e-5 on that weight, 2.1e-5
# relative on step 2's pg_loss; the aux-loss run keeps the strict tolerances (observed 2.8e-6)
NO_AUX_RTOL, NO_AUX_PARAM_ATOL = 1e-4, 1e-4
AUX = 0.05  # moe_aux_loss_coeff of the aux-loss scenario (large enough to move the router visibly)
SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32)


def _perturbed(model):
    with torch.no_grad():  # non-trivial norms and router so every tensor's placement is checked
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return model


def qwen3(vocab=263, tied=False):
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=vocab, intermediate_size=128, tie_word_embeddings=tied, max_position_embeddings=64, **SHAPE
    )
    return _perturbed(Qwen3ForCausalLM(config))


def qwen3_moe(vocab=263, norm_topk_prob=True, experts=4):
    torch.manual_seed(1)
    config = Qwen3MoeConfig(
        vocab_size=vocab,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=experts,
        num_experts_per_tok=2,
        norm_topk_prob=norm_topk_prob,
        router_aux_loss_coef=0.001,
        max_position_embeddings=64,
        **SHAPE,
    )
    return _perturbed(Qwen3MoeForCausalLM(config))


def _hf_state(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


# --- conversion (no megatron needed) --------------------------------------------------------------------
@pytest.mark.parametrize("build", [qwen3, lambda: qwen3(tied=True), qwen3_moe])
@pytest.mark.parametrize("tp,ep", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_round_trip_through_tp_and_ep_shards_is_exact(build, tp, ep):
    model = build()
    config, hf = model.config, _hf_state(model)
    experts = convert.num_experts(config)
    full = convert.hf_to_mcore(hf, config, tp)
    ranks = {
        (e, t): convert.shard_tp(convert.select_ep(full, experts, ep, e), tp, t) for e in range(ep) for t in range(tp)
    }
    merged = {}
    for e in range(ep):
        merged.update(convert.globalize_ep(convert.merge_tp([ranks[e, t] for t in range(tp)]), experts, ep, e))
    assert merged.keys() == full.keys() and all(torch.equal(merged[k], full[k]) for k in full)
    back = convert.mcore_to_hf(merged, config)
    assert back.keys() == hf.keys() == convert.hf_parameter_names(config)
    assert all(torch.equal(back[k], hf[k]) for k in hf)
    shard = ranks[ep - 1, tp - 1]
    assert shard["decoder.layers.0.self_attention.q_layernorm.weight"].shape == (32,)  # per head, replicated
    assert "decoder.layers.0.self_attention.linear_qkv.bias" not in shard  # Qwen3: no QKV bias
    if experts:
        local = [k for k in shard if k.startswith("decoder.layers.0.mlp.experts.")]
        assert len(local) == 2 * experts // ep  # fc1 + fc2 of this rank's experts, numbered from 0
        fc1 = shard[f"decoder.layers.0.mlp.experts.local_experts.{experts // ep - 1}.linear_fc1.weight"]
        gate_up = hf["model.layers.0.mlp.experts.gate_up_proj"][experts - 1]  # the last rank's last expert
        gate, up = gate_up.chunk(2)
        assert torch.equal(fc1, torch.cat([gate.chunk(tp)[tp - 1], up.chunk(tp)[tp - 1]]))
        assert torch.equal(shard["decoder.layers.0.mlp.router.weight"], hf["model.layers.0.mlp.gate.weight"])


def test_moe_export_loads_into_hf_strictly():
    """The exported names and shapes are the installed transformers' own (3-D experts): the checkpoint copy
    (save_checkpoint's load_state_dict) and the weight sync take them as they are."""
    model = qwen3_moe()
    exported = convert.mcore_to_hf(convert.hf_to_mcore(_hf_state(model), model.config), model.config)
    fresh = Qwen3MoeForCausalLM(model.config)
    fresh.load_state_dict(exported, strict=True)
    assert all(torch.equal(p, exported[n]) for n, p in fresh.named_parameters())


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(mlp_only_layers=[1]), "mlp_only_layers"),
        (dict(decoder_sparse_step=2), "decoder_sparse_step"),
        (dict(use_sliding_window=True), "use_sliding_window"),
    ],
)
def test_moe_layouts_megatron_does_not_build_are_refused(change, match):
    config = qwen3_moe().config
    for key, value in change.items():
        setattr(config, key, value)
    with pytest.raises(ValueError, match=match):
        convert.check_supported(config)


# --- strategy_config MoE keys -------------------------------------------------------------------------------
def _moe_kwargs(hf_config, **keys):
    from roll.strategies.megatron.config import resolve_megatron_config
    from roll.strategies.megatron.moe import moe_config

    return moe_config(hf_config, resolve_megatron_config(keys, world_size=2))


def test_moe_keys_take_the_models_router_and_rolls_meaning():
    ms.require_megatron()
    config = qwen3_moe(norm_topk_prob=False).config
    kwargs = _moe_kwargs(config, moe_token_dispatcher_type="alltoall", expert_model_parallel_size=2)
    assert kwargs["num_moe_experts"] == 4 and kwargs["moe_ffn_hidden_size"] == 32 and kwargs["moe_router_topk"] == 2
    assert kwargs["moe_router_pre_softmax"] is True  # no renormalisation of the top-k probabilities
    assert kwargs["moe_aux_loss_coeff"] == 0.001  # null: the model's router_aux_loss_coef, as ROLL
    assert kwargs["moe_token_dispatcher_type"] == "alltoall" and kwargs["expert_model_parallel_size"] == 2
    assert _moe_kwargs(qwen3_moe().config, moe_router_topk=2, moe_aux_loss_coeff=0.0)["moe_aux_loss_coeff"] == 0.0
    assert _moe_kwargs(qwen3_moe().config)["moe_router_pre_softmax"] is False
    # ROLL's moe_layer_recompute: megatron-core's selective recomputation of the MoE layer
    recompute = _moe_kwargs(qwen3_moe().config, moe_layer_recompute=True)
    assert (recompute["recompute_granularity"], recompute["recompute_modules"]) == ("selective", ["moe"])
    both = _moe_kwargs(qwen3_moe().config, moe_layer_recompute=True, recompute_granularity="selective")
    assert both["recompute_modules"] == ["core_attn", "moe"]
    assert _moe_kwargs(qwen3().config) == {}  # dense: no MoE settings


@pytest.mark.parametrize(
    "model,keys,match",
    [
        (qwen3, dict(moe_router_topk=2), r"\['moe_router_topk'\] need an MoE model; 'qwen3' is dense"),
        (qwen3, dict(expert_model_parallel_size=2), "need an MoE model"),
        (qwen3, dict(moe_layer_recompute=True), "need an MoE model"),
        (qwen3_moe, dict(moe_router_topk=4), "moe_router_topk=4 disagrees with the model's num_experts_per_tok=2"),
        (qwen3_moe, dict(expert_model_parallel_size=3), "expert_model_parallel_size=3 does not divide"),
        (qwen3_moe, dict(moe_router_load_balancing_type="sinkhorn"), "sinkhorn"),
    ],
)
def test_moe_keys_the_model_cannot_honour_are_errors(model, keys, match):
    ms.require_megatron()
    with pytest.raises(ValueError, match=match):
        _moe_kwargs(model().config, **keys)


def test_moe_training_limits_are_errors():
    from roll.strategies.megatron.moe import check_moe_training

    with pytest.raises(ValueError, match="MoE model with tensor_model_parallel_size > 1 needs sequence_parallel"):
        check_moe_training(qwen3_moe().config, {"tensor_model_parallel_size": 2})
    check_moe_training(qwen3_moe().config, {"tensor_model_parallel_size": 2, "sequence_parallel": True})
    check_moe_training(qwen3().config, {"tensor_model_parallel_size": 2})
    with pytest.raises(ValueError, match=r"LoRA \(model_args.lora_\*\) on an MoE model"):
        check_moe_training(qwen3_moe().config, {}, lora=True)
    check_moe_training(qwen3().config, {}, lora=True)


def test_grouped_gemm_without_its_kernels_is_an_error_not_a_fallback(monkeypatch):
    ms.require_megatron()
    from roll.strategies.megatron import moe

    monkeypatch.setattr(moe, "grouped_gemm_available", lambda: False)
    with pytest.raises(ValueError, match="moe_grouped_gemm=true needs megatron-core's grouped GEMM kernels"):
        _moe_kwargs(qwen3_moe().config, moe_grouped_gemm=True)
    monkeypatch.setattr(moe, "grouped_gemm_available", lambda: True)
    assert _moe_kwargs(qwen3_moe().config, moe_grouped_gemm=True)["moe_grouped_gemm"] is True


@pytest.mark.parametrize(
    "keys,match",
    [
        (dict(moe_token_dispatcher_type="flex"), "moe_token_dispatcher_type='flex'"),
        (dict(moe_router_load_balancing_type="bogus"), "moe_router_load_balancing_type"),
        (dict(moe_router_topk=0), "moe_router_topk=0"),
        (dict(moe_aux_loss_coeff=-1), "moe_aux_loss_coeff=-1"),
        (dict(moe_layer_recompute=True, recompute_granularity="full"), "moe_layer_recompute=true with"),
    ],
)
def test_moe_key_values_are_checked_with_the_config(keys, match):
    from roll.strategies.megatron.config import resolve_megatron_config

    with pytest.raises(ValueError, match=match):
        resolve_megatron_config(keys, world_size=2)


# --- with megatron-core, in the session's 2-rank launch (conftest.py) -------------------------------------------
TRAIN = {  # name: (strategy_config, micro, accumulation); every one trains like the plain HF loop
    "moe/tp1_dp2": ({"moe_aux_loss_coeff": 0.0}, 4, 2),
    "moe/ep2_alltoall_recompute": (
        {
            "moe_aux_loss_coeff": 0.0,
            "expert_model_parallel_size": 2,
            "moe_token_dispatcher_type": "alltoall",
            "moe_layer_recompute": True,
        },
        4,
        2,
    ),
    "moe/aux_tp1_dp2": ({"moe_aux_loss_coeff": AUX}, 4, 2),
    # TP2 needs sequence parallelism for MoE (megatron-core): the experts route each rank's part of the sequence,
    # and Qwen3's q/k norms run under it
    "moe/tp2_sp": ({"moe_aux_loss_coeff": 0.0, "tensor_model_parallel_size": 2, "sequence_parallel": True}, 4, 4),
    "moe/aux_tp2_sp": ({"moe_aux_loss_coeff": AUX, "tensor_model_parallel_size": 2, "sequence_parallel": True}, 4, 4),
}


CHECKPOINTED = "moe/ep2_alltoall_recompute"  # saved after step 1: each rank its experts, plus the HF copy


def scenarios(workdir) -> list[dict]:
    """Logits (qwen3 at TP1/TP2, qwen3_moe at TP1/TP2/EP2, without norm_topk_prob at TP1) and MoE training; the
    models go into `workdir` (training: with the vocabulary of the harness's batches)."""
    vocab = AutoConfig.from_pretrained(workdir / "model").vocab_size
    models = {"qwen3": qwen3(), "qwen3_moe": qwen3_moe(), "qwen3_moe_unnormed": qwen3_moe(norm_topk_prob=False)}
    for name, model in models.items():
        model.save_pretrained(workdir / name)
    qwen3_moe(vocab=vocab).save_pretrained(workdir / "moe_train")
    out = [
        dict(name=f"{name}/tp{tp}", logits=True, tp=tp, ep=ep, model_dir=str(workdir / name))
        for name, tp, ep in (("qwen3", 1, 1), ("qwen3", 2, 1), ("qwen3_moe", 1, 1), ("qwen3_moe", 2, 1))
    ]
    out.append(dict(name="qwen3_moe/ep2", logits=True, tp=1, ep=2, model_dir=str(workdir / "qwen3_moe")))
    out.append(dict(name="qwen3_moe_unnormed/tp1", logits=True, tp=1, model_dir=str(workdir / "qwen3_moe_unnormed")))
    for name, (config, micro, accumulation) in TRAIN.items():
        out.append(
            dict(
                name=name,
                strategy="megatron_train",
                model="moe_train",
                config=config,
                micro=micro,
                accumulation=accumulation,
                save_after=1 if name == CHECKPOINTED else None,
            )
        )
    return out


@pytest.mark.parametrize(
    "name", ["qwen3/tp1", "qwen3/tp2", "qwen3_moe/tp1", "qwen3_moe/tp2", "qwen3_moe/ep2", "qwen3_moe_unnormed/tp1"]
)
def test_converted_model_logits_match_hf(megatron_runs, name):
    result = megatron_runs["results"][name]
    mask = result["mask"].bool()
    assert result["got"].shape == result["want"].shape
    assert (result["got"] - result["want"]).abs()[mask].max().item() < LOGITS_ATOL


def _aux_loss(router_logits: torch.Tensor, topk: int, valid: torch.Tensor) -> torch.Tensor:
    """megatron-core 0.16.1's Switch load-balancing loss of one layer and micro-batch (coefficient 1) over the
    T non-padding tokens: E / (k · T²) · Σ_i (Σ_x p_xi) · n_i, n_i the tokens routed to expert i."""
    probs = router_logits.float().softmax(dim=-1)[valid]
    tokens, experts = probs.shape
    counts = torch.zeros(experts).index_add_(0, probs.topk(topk, dim=-1).indices.flatten(), torch.ones(tokens * topk))
    return (probs.sum(dim=0) * counts).sum() * experts / (topk * tokens * tokens)


def _reference(model_dir, data_file, coeff: float) -> dict:
    """The plain HF loop (harness.plain_steps) over the MoE checkpoint; + coeff · Σ_layers aux per micro-batch."""
    from transformers import AutoModelForCausalLM

    from roll.configs.worker import TrainingArgs
    from roll.strategies.train_common import build_adamw, build_lr_scheduler

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    args = TrainingArgs(per_device_train_batch_size=4, gradient_accumulation_steps=4, **h.TRAINING)
    captured = {}

    def forward(**inputs):
        out = model(**inputs, output_router_logits=True)
        valid, topk = inputs["attention_mask"].flatten().bool(), model.config.num_experts_per_tok
        captured["aux"] = sum(_aux_loss(layer, topk, valid) for layer in out.router_logits)
        return out

    def step_loss(micro, logits):
        loss, metrics = h.loss_fn(micro, logits)
        return loss + coeff * captured["aux"], metrics

    optimizer = build_adamw(model.parameters(), args)
    scheduler = build_lr_scheduler(optimizer, args, h.STEPS)
    batches = torch.load(data_file)
    steps = h.plain_steps(forward, list(model.parameters()), optimizer, scheduler, batches, args, 4, step_loss)
    return {"steps": steps, "params": {name: p.detach().clone() for name, p in model.named_parameters()}}


@pytest.fixture(scope="module")
def references(megatron_runs):
    model_dir = megatron_runs["workdir"] / "moe_train"
    return {coeff: _reference(model_dir, megatron_runs["data_file"], coeff) for coeff in (0.0, AUX)}


@pytest.mark.parametrize("name", list(TRAIN))
def test_moe_training_equals_plain_hf(megatron_runs, references, name):
    """TP1×DP2, EP2 (alltoall dispatcher, MoE-layer recomputation) and TP2 with sequence parallelism (each TP rank
    routes its part of the sequence; the padding mask is split with it) train like the plain HF loop; with
    moe_aux_loss_coeff the aux loss enters exactly as megatron-core's Switch term per layer and micro-batch."""
    result = megatron_runs["results"][name]
    aux = "aux" in name
    reference = references[AUX if aux else 0.0]
    assert all(torch.isfinite(torch.tensor(step["actor/pg_loss"])) for step in result["steps"])
    rtol, param_atol = (LOSS_RTOL, PARAM_ATOL) if aux else (NO_AUX_RTOL, NO_AUX_PARAM_ATOL)
    _assert_steps_close(result["steps"], reference["steps"], LOSS_KEYS, rtol=rtol, atol=LOSS_ATOL)
    assert _max_param_diff(result["params"], reference["params"]) < param_atol


def test_aux_loss_moves_the_router(megatron_runs, references):
    """The aux-loss run is not the plain one: the coefficient reaches the router (and, through it, the rest)."""
    with_aux, without = megatron_runs["results"]["moe/aux_tp1_dp2"], megatron_runs["results"]["moe/tp1_dp2"]
    router = "model.layers.0.mlp.gate.weight"
    assert (with_aux["params"][router] - without["params"][router]).abs().max().item() > 1e-4
    initial = Qwen3MoeForCausalLM.from_pretrained(megatron_runs["workdir"] / "moe_train").state_dict()
    assert (without["params"][router] - initial[router]).abs().max().item() > 1e-4  # weights change


def test_expert_parallel_checkpoint_has_a_complete_hf_copy(megatron_runs):
    """save_checkpoint at EP2 gathers every rank's experts into the HF copy: it loads with no key missing."""
    hf_dir = megatron_runs["workdir"] / CHECKPOINTED / "hf"
    model, info = Qwen3MoeForCausalLM.from_pretrained(hf_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    initial = Qwen3MoeForCausalLM.from_pretrained(megatron_runs["workdir"] / "moe_train").state_dict()
    moved = model.state_dict()["model.layers.1.mlp.experts.down_proj"] - initial["model.layers.1.mlp.experts.down_proj"]
    assert moved.flatten(1).abs().amax(dim=1).min().item() > 0  # one optimizer step moved every expert


def test_expert_parallel_scoring_of_uneven_shards(megatron_runs, references):
    """EP2 scores uneven shards (3 and 7 rows: 1 and 3 micro-batches; the short rank repeats one, as the expert
    exchange needs both ranks in every forward) like HF with the reference's trained weights."""
    from tests.strategies.test_train_strategies import _log_probs

    model = Qwen3MoeForCausalLM.from_pretrained(megatron_runs["workdir"] / "moe_train").eval()
    model.load_state_dict(references[0.0]["params"])
    expected = _log_probs(model, torch.load(megatron_runs["data_file"])[0])
    for name in ("moe/tp1_dp2", "moe/ep2_alltoall_recompute"):
        got = torch.cat(megatron_runs["results"][name]["log_probs"])
        assert got.shape == expected.shape and torch.allclose(got, expected, atol=1e-4), name
