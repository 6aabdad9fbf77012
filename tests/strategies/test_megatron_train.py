"""`megatron_train` / `megatron_infer` give the same training as plain PyTorch: 2 ranks (gloo) on the CPU
through roll.platforms.megatron_cpu (megatron-core 0.16.1, the `megatron` extra), from the same tiny
Qwen2 checkpoint and data as tests/strategies/test_train_strategies.py, 3 optimizer steps of the
production PPO loss (AdamW + weight decay, linear LR with warm-up, clipping that binds).

Layouts on 2 ranks: TP1 × DP2 (plain, with the distributed optimizer, and with it plus overlap_grad_reduce),
TP2 (plain, with full recomputation, with sequence parallelism — padded and packed), PP2, and TP1×DP2 with
megatron-core's plain-torch kernel fusions on. The model-parallel ranks of one data-parallel rank get the same
shard (the Cluster's dispatch by data-parallel rank, harness.dispatched),
so TP2/PP2 take micro 4 × accumulation 4 over the 16 rows of a step and TP1×DP2 micro 4 × accumulation 2 per
rank — the same global batch as the reference (micro 4 × accumulation 4).

Tolerances (float32), as the other strategies' test: per-step losses and grad norms rtol 1e-5 (atol 1e-6),
final parameters max |Δ| < 2e-5; resume and offload vs the same layout's uninterrupted run: bit-identical.
Forward-only megatron_infer log-probs vs HF: atol 1e-5.
"""

import pytest
import torch

from tests.strategies import harness as h
from tests.strategies import offload_probe
from tests.strategies.test_train_strategies import DYNAMIC, LOSS_KEYS, _assert_steps_close, _log_probs, _max_param_diff

LOSS_RTOL, LOSS_ATOL, PARAM_ATOL = 1e-5, 1e-6, 2e-5
BF16_RTOL, BF16_PARAM_ATOL = 5e-2, 2e-2  # bf16 forward/backward against the fp32 reference
BF16 = "tp1_dp2_distopt_bf16"
TP2 = {"tensor_model_parallel_size": 2}
TP2_SP = {**TP2, "sequence_parallel": True}
LAYOUTS = {  # name: (strategy_config, micro, accumulation)
    "tp1_dp2": ({}, 4, 2),
    "tp1_dp2_distopt": ({"use_distributed_optimizer": True}, 4, 2),
    "tp2": (TP2, 4, 4),
    "tp2_recompute": ({**TP2, "recompute_granularity": "full"}, 4, 4),
    "tp2_sp": (TP2_SP, 4, 4),
    "pp2": ({"pipeline_model_parallel_size": 2}, 4, 4),
}
OVERLAP = {"use_distributed_optimizer": True, "overlap_grad_reduce": True}  # as ROLL's async megatron examples
RESUMED = ("tp1_dp2_distopt", "tp2", "pp2")
OFFLOADED = ("tp2", "tp1_dp2_distopt")  # DDP buffers without / with the distributed optimizer's param buffer
DYNAMIC_BATCHING = ("tp1_dp2", "tp2")  # PP 1 only (pipeline stages exchange fixed shapes)
PACKED = ("tp1_dp2", "tp2", "tp2_sp")  # use_sequence_packing: one packed row per micro-batch (PP 1 only, as above)
# megatron-core's plain-torch fusions (roll/strategies/megatron/fusions.py), against tp1_dp2 with them off
TORCH_FUSIONS = {"bias_activation_fusion": True, "bias_dropout_fusion": True}


def scenarios() -> list[dict]:
    out = [
        dict(
            name=name,
            strategy="megatron_train",
            config=config,
            micro=micro,
            accumulation=accumulation,
            save_after=1 if name in RESUMED else None,
        )
        for name, (config, micro, accumulation) in LAYOUTS.items()
    ]
    for name in RESUMED:
        config, micro, accumulation = LAYOUTS[name]
        out.append(
            dict(
                name=f"{name}/resumed",
                strategy="megatron_train",
                config=config,
                micro=micro,
                accumulation=accumulation,
                resume_from=name,
            )
        )
    out.append(dict(name="tp2/micro1_acc16", strategy="megatron_train", config=TP2, micro=1, accumulation=16))
    out.append(dict(name="tp1_dp2_distopt/overlap", strategy="megatron_train", config=OVERLAP, micro=4, accumulation=2))
    # bf16 parameters, fp32 main params sharded by the distributed optimizer; saved after step 1 and resumed
    bf16 = dict(strategy="megatron_train", config={"use_distributed_optimizer": True}, micro=4, accumulation=2)
    out.append(dict(name=BF16, dtype="bfloat16", save_after=1, **bf16))
    out.append(dict(name=f"{BF16}/resumed", dtype="bfloat16", resume_from=BF16, **bf16))
    # token-mean: split-invariant through train_common.global_batch_info (counts over all ranks, shared shards)
    for name, config, micro, accumulation in (("tp2", TP2, 1, 16), ("tp2", TP2, 16, 1), ("tp1_dp2", {}, 8, 1)):
        out.append(
            dict(
                name=f"{name}/token_mean_micro{micro}_acc{accumulation}",
                strategy="megatron_train",
                config=config,
                micro=micro,
                accumulation=accumulation,
                loss_agg_mode="token-mean",
            )
        )
    for name in OFFLOADED:
        config, micro, accumulation = LAYOUTS[name]
        out.append(
            dict(
                name=f"{name}/offload",
                strategy="megatron_train",
                config=config,
                micro=micro,
                accumulation=accumulation,
                offload=True,
            )
        )
    out.append(dict(name="infer_tp2", strategy="megatron_infer", config=TP2, load_weights=True, offload=True))
    out.append(dict(name="sum_pi_squared_pp2", sum_pi_squared=True, config={"pipeline_model_parallel_size": 2}))
    for name in DYNAMIC_BATCHING:  # token-budget micro-batches (train and scoring) vs the fixed split
        config, micro, accumulation = LAYOUTS[name]
        out.append(
            dict(
                name=f"{name}/dynamic",
                strategy="megatron_train",
                config=config,
                micro=micro,
                accumulation=accumulation,
                worker=DYNAMIC,
                record_micro_rows=name == "tp1_dp2",
            )
        )
    for name in PACKED:
        config, micro, accumulation = LAYOUTS[name]
        out.append(
            dict(
                name=f"{name}/packed",
                strategy="megatron_train",
                config=config,
                micro=micro,
                accumulation=accumulation,
                worker={"use_sequence_packing": True},
            )
        )
    out.append(
        dict(
            name="tp1_dp2/fused",
            runner="tests.strategies.megatron_scenarios.run_counting_fused_calls",
            strategy="megatron_train",
            config=TORCH_FUSIONS,
            micro=LAYOUTS["tp1_dp2"][1],
            accumulation=LAYOUTS["tp1_dp2"][2],
        )
    )
    return out


@pytest.fixture(scope="module")
def runs(megatron_runs):
    """`scenarios()` ran in the session's one megatron launch (conftest.py)."""
    model_dir, data_file = megatron_runs["model_dir"], megatron_runs["data_file"]
    reference = h.plain_reference(model_dir, data_file)
    return {"reference": reference, "results": megatron_runs["results"], "model_dir": model_dir, "data_file": data_file}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_equivalent_to_plain_pytorch(runs, name):
    result, reference = runs["results"][name], runs["reference"]
    _assert_steps_close(
        result["steps"], reference["steps"], LOSS_KEYS + ("actor/pg_clipfrac",), rtol=LOSS_RTOL, atol=LOSS_ATOL
    )
    assert _max_param_diff(result["params"], reference["params"]) < PARAM_ATOL


def test_micro_batch_1_x_16_equals_reference(runs):
    """Same training with 16 micro-batches of 1 row (ppo_kl / clipfrac are per-micro-batch means: not compared)."""
    result, reference = runs["results"]["tp2/micro1_acc16"], runs["reference"]
    _assert_steps_close(
        result["steps"],
        reference["steps"],
        ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "grad_norm", "lr"),
        rtol=LOSS_RTOL,
        atol=LOSS_ATOL,
    )
    assert _max_param_diff(result["params"], reference["params"]) < PARAM_ATOL


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_log_probs_and_checksum_of_trained_model(runs, name):
    from transformers import AutoModelForCausalLM

    from roll.strategies.train_common import checksum

    result, reference = runs["results"][name], runs["reference"]
    model = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).eval()
    model.load_state_dict(reference["params"])
    expected = _log_probs(model, torch.load(runs["data_file"])[0])
    got = torch.cat(result["log_probs"])
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-4)
    assert result["checksum"] == pytest.approx(checksum(reference["params"].items()), rel=1e-6)


@pytest.mark.parametrize("name", RESUMED)
def test_save_load_continue_equals_uninterrupted(runs, name):
    uninterrupted, resumed = runs["results"][name], runs["results"][f"{name}/resumed"]
    assert resumed["first_step"] == 1 and len(resumed["steps"]) == h.STEPS - 1
    _assert_steps_close(resumed["steps"], uninterrupted["steps"][1:], LOSS_KEYS, rtol=0, atol=0)
    assert _max_param_diff(resumed["params"], uninterrupted["params"]) == 0
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= set(uninterrupted["hf_files"])


@pytest.mark.parametrize("name", OFFLOADED)
def test_offload_reload_leaves_training_unchanged(runs, name):
    plain, offloaded = runs["results"][name], runs["results"][f"{name}/offload"]
    _assert_steps_close(offloaded["steps"], plain["steps"], LOSS_KEYS, rtol=0, atol=0)
    assert _max_param_diff(offloaded["params"], plain["params"]) == 0


@pytest.mark.parametrize("name", OFFLOADED)
def test_offload_moves_parameters_gradient_buffers_and_optimizer_state(runs, name):
    """Fails on c1685f7, whose megatron offload returned early without a GPU (and, on a GPU, crashed on the
    ChainedOptimizer's ProxyDict state): every parameter, main_grad and optimizer tensor of every chained
    optimizer leaves compute memory at offload and is back bit-identical at reload."""
    offload_probe.assert_every_tensor_moved(runs["results"][f"{name}/offload"]["round_trips"], gradients=True)


def test_megatron_infer_offload_moves_every_weight(runs):
    """A round trip before scoring: the weights leave and come back (log-probs vs HF checked below)."""
    offload_probe.assert_every_tensor_moved(runs["results"]["infer_tp2"]["round_trips"], optimizer=False)


def test_megatron_infer_scores_like_hf_and_loads_weights(runs):
    from transformers import AutoModelForCausalLM

    from roll.strategies.train_common import checksum

    result = runs["results"]["infer_tp2"]
    model = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).eval()
    batch0 = torch.load(runs["data_file"])[0]
    assert torch.allclose(torch.cat(result["log_probs"]), _log_probs(model, batch0), atol=1e-5)
    assert result["checksum"] == pytest.approx(checksum(model.named_parameters()), rel=1e-9)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.01)
    assert result["shifted_checksum"] == pytest.approx(checksum(model.named_parameters()), rel=1e-9)
    assert _max_param_diff(result["params"], dict(model.named_parameters())) < 1e-6
    assert torch.allclose(torch.cat(result["shifted_log_probs"]), _log_probs(model, batch0), atol=1e-5)


def test_torch_fusions_train_like_unfused(runs):
    """bias_activation_fusion + bias_dropout_fusion on (megatron-core's torch.compile'd SwiGLU with its
    hand-written backward, and bias-dropout-add; no TransformerEngine/Apex): the fused functions ran (counted in
    the rank) and training matches tp1_dp2 with them off. Same maths in another float order: differences are
    float32 rounding (measured ≤ 1.3e-6 relative per step, 7.4e-7 on parameters after 3 AdamW steps, 4.8e-7 on
    log-probs), so the layouts' tolerances apply."""
    fused, unfused = runs["results"]["tp1_dp2/fused"], runs["results"]["tp1_dp2"]
    assert all(count > 0 for count in fused["fused_calls"].values()), fused["fused_calls"]
    _assert_steps_close(fused["steps"], unfused["steps"], LOSS_KEYS, rtol=LOSS_RTOL, atol=LOSS_ATOL)
    assert _max_param_diff(fused["params"], unfused["params"]) < PARAM_ATOL
    assert torch.allclose(torch.cat(fused["log_probs"]), torch.cat(unfused["log_probs"]), atol=1e-5)


@pytest.mark.parametrize(
    "config,match",
    [
        ({"tensor_model_parallel_size": 2, "bogus": 1}, r"unknown keys \['bogus'\]; valid: \["),
        ({"context_parallel_size": 2}, "TransformerEngine"),
        ({"expert_model_parallel_size": 0}, "expert_model_parallel_size"),  # MoE keys vs the model: test_megatron_moe
        ({"virtual_pipeline_model_parallel_size": 2}, "interleaved"),
        ({"expert_model_parallel_size": 0}, "expected an integer ≥ 1"),
        ({**TP2, "sequence_parallel": True}, "__never__"),
        (
            {"expert_model_parallel_size": 8, "moe_shared_expert_overlap": True},
            r"unknown keys \['moe_shared_expert_overlap'\]",
        ),
        ({"recompute_granularity": "block"}, "recompute_granularity"),
        ({"tensor_model_parallel_size": 3}, "not divisible"),
        ({"overlap_grad_reduce": True}, "__never__"),
        (
            {"use_distributed_optimizer": True, "overlap_param_gather": True},
            "CPU-only" if not torch.cuda.is_available() else "__never__",
        ),
        ({"persist_layer_norm": True}, "persist_layer_norm=True is refused: Qwen2/Llama use RMSNorm"),
        ({"masked_softmax_fusion": True}, "masked_softmax_fusion=True is refused: .*ignores the attention mask"),
        ({"bias_activation_fusion": "yes"}, "bias_activation_fusion='yes': expected true or false"),
    ],
)
def test_strategy_config_is_validated(config, match):
    from roll.strategies.megatron_train import resolve_megatron_config

    if match == "__never__":
        resolve_megatron_config(config, 2)
        return
    with pytest.raises(ValueError, match=match):
        resolve_megatron_config(config, 2)


def test_sequence_parallel_is_turned_off_at_tp1_as_in_roll(monkeypatch):
    """ROLL's mcore_adapter turns sequence_parallel off (a warning) when TP is 1, where megatron-core would refuse
    it; ROLL's TP1 megatron examples (qwen3-30BA3B, ...) set it. Kept at TP2."""
    from roll.strategies.megatron import config as megatron_config

    warnings = []
    monkeypatch.setattr(megatron_config.logger, "warning", lambda message, *args: warnings.append(message % args))
    assert megatron_config.resolve_megatron_config({"sequence_parallel": True}, 2)["sequence_parallel"] is False
    assert len(warnings) == 1 and "sequence_parallel=true is turned off at tensor_model_parallel_size 1" in warnings[0]
    assert megatron_config.resolve_megatron_config(TP2_SP, 2)["sequence_parallel"] is True
    assert len(warnings) == 1


def test_megatron_infer_sum_pi_squared_like_hf(runs):
    """The optimal-token-baseline input Σπ² at PP2 (uneven 3 / 7 rows: padded pipeline micro-batch)."""
    from transformers import AutoModelForCausalLM

    from roll.utils.functional import slice_response_logits

    model = AutoModelForCausalLM.from_pretrained(runs["model_dir"], dtype=torch.float32).eval()
    batch = h.as_proto(torch.load(runs["data_file"])[0], slice(0, 10))
    with torch.no_grad():
        logits = model(**{k: batch.batch[k] for k in ("input_ids", "attention_mask", "position_ids")}).logits
    probs = slice_response_logits(logits, h.RESPONSE_LENGTH).softmax(-1)
    expected = probs.square().sum(-1) * batch.batch["response_mask"]
    assert torch.allclose(torch.cat(runs["results"]["sum_pi_squared_pp2"]["sum_pi_squared"]), expected, atol=1e-5)


def test_token_mean_is_split_and_layout_invariant(runs):
    """token-mean over the whole step: TP2 micro 1 × 16 = TP2 micro 16 × 1 = TP1×DP2 micro 8 × 1."""
    keys = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "grad_norm", "lr")
    small, large = (runs["results"][f"tp2/token_mean_{s}"] for s in ("micro1_acc16", "micro16_acc1"))
    _assert_steps_close(small["steps"], large["steps"], keys, rtol=LOSS_RTOL, atol=LOSS_ATOL)
    assert _max_param_diff(small["params"], large["params"]) < PARAM_ATOL
    data_parallel = runs["results"]["tp1_dp2/token_mean_micro8_acc1"]
    _assert_steps_close(data_parallel["steps"], large["steps"], ("grad_norm", "lr"), rtol=LOSS_RTOL, atol=LOSS_ATOL)
    assert _max_param_diff(data_parallel["params"], large["params"]) < PARAM_ATOL


@pytest.mark.parametrize("name", DYNAMIC_BATCHING)
def test_dynamic_batching_equals_fixed(runs, name):
    """Token-budget micro-batches (a different count per step than gradient_accumulation_steps; megatron's
    num_microbatches follows it) give the fixed split's training and log-probs."""
    dynamic, fixed = runs["results"][f"{name}/dynamic"], runs["results"][name]
    if dynamic["micro_rows"]:
        assert {len(step) for step in dynamic["micro_rows"]} != {LAYOUTS[name][2]}, dynamic["micro_rows"]
    _assert_steps_close(
        dynamic["steps"],
        fixed["steps"],
        ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "grad_norm", "lr"),
        rtol=LOSS_RTOL,
        atol=LOSS_ATOL,
    )
    assert _max_param_diff(dynamic["params"], fixed["params"]) < PARAM_ATOL
    assert torch.allclose(torch.cat(dynamic["log_probs"]), torch.cat(fixed["log_probs"]), atol=1e-5)


@pytest.mark.parametrize("name", PACKED)
def test_sequence_packing_equals_padded(runs, name):
    """One packed row per micro-batch with a block-diagonal causal mask (RoPE rotates by the packed index:
    only in-row distances matter) trains and scores like the padded micro-batches."""
    packed, padded = runs["results"][f"{name}/packed"], runs["results"][name]
    _assert_steps_close(packed["steps"], padded["steps"], LOSS_KEYS, rtol=LOSS_RTOL, atol=LOSS_ATOL)
    assert _max_param_diff(packed["params"], padded["params"]) < PARAM_ATOL
    assert torch.allclose(torch.cat(packed["log_probs"]), torch.cat(padded["log_probs"]), atol=1e-5)


def test_overlap_grad_reduce_trains_like_synchronous_reduce(runs):
    """overlap_grad_reduce (set by ROLL's async megatron examples) with the distributed optimizer at DP2 on gloo:
    megatron launches each bucket's reduce-scatter as an async collective from the backward hooks (no CUDA
    stream with one distributed-optimizer instance) and waits in finalize_model_grads. Same sums in the same
    order as the synchronous reduce: observed bit-identical; held to the layouts' tolerances."""
    overlap, plain = runs["results"]["tp1_dp2_distopt/overlap"], runs["results"]["tp1_dp2_distopt"]
    _assert_steps_close(overlap["steps"], plain["steps"], LOSS_KEYS, rtol=LOSS_RTOL, atol=LOSS_ATOL)
    assert _max_param_diff(overlap["params"], plain["params"]) < PARAM_ATOL
    assert torch.allclose(torch.cat(overlap["log_probs"]), torch.cat(plain["log_probs"]), atol=1e-5)


@pytest.mark.parametrize("name", ["tp2", "tp2/packed"])
def test_sequence_parallel_trains_like_tp2_without_it(runs, name):
    """sequence_parallel at TP2 (the sequence split over the TP ranks outside the TP regions: embedding output
    scattered, norms on half the tokens each, gathered before the column-parallel linears and the output layer,
    reduce-scattered after the row-parallel ones) trains and scores as TP2 without it, at the layouts'
    tolerances (the same maths; on 2 ranks measured bit-identical). Packed micro-batches of an odd token count
    (asserted) are right-padded to a multiple of TP. Fails without the norms' `sequence_parallel` tag (each rank's
    norm gradient from half the tokens, never summed over TP: parameters off by 3.4e-3 after 3 steps)."""
    sp, plain = runs["results"][name.replace("tp2", "tp2_sp")], runs["results"][name]
    if name.endswith("packed"):
        micro = LAYOUTS["tp2_sp"][1]
        masks = [batch["attention_mask"] for batch in torch.load(runs["data_file"])]
        counts = [int(mask[i : i + micro].sum()) for mask in masks for i in range(0, len(mask), micro)]
        assert any(count % 2 for count in counts), counts
    _assert_steps_close(sp["steps"], plain["steps"], LOSS_KEYS, rtol=LOSS_RTOL, atol=LOSS_ATOL)
    assert _max_param_diff(sp["params"], plain["params"]) < PARAM_ATOL
    assert torch.allclose(torch.cat(sp["log_probs"]), torch.cat(plain["log_probs"]), atol=1e-5)


@pytest.mark.parametrize(
    "keys,parallel,match",
    [
        ({"use_sequence_packing": True}, {"pipeline_model_parallel_size": 2}, "pipeline_model_parallel_size 1"),
        (DYNAMIC, {"pipeline_model_parallel_size": 2}, "pipeline_model_parallel_size 1"),
    ],
)
def test_micro_batching_limits_are_errors(tmp_path, keys, parallel, match):
    import dataclasses

    from roll.strategies.megatron_train import check_micro_batching

    config = h.make_worker_config(tmp_path, "megatron_train", None, 1, 1, 2)
    with pytest.raises(ValueError, match=match):
        check_micro_batching(dataclasses.replace(config, **keys), parallel)


def test_bf16_params_with_fp32_main_params_train_like_fp32_and_resume_exactly(runs):
    """bf16 model parameters, fp32 main params in megatron's optimizer: the same training as fp32 within bf16
    rounding, and a resume restores the main params (the bf16 parameters alone cannot), so it is exact."""
    bf16, resumed, reference = runs["results"][BF16], runs["results"][f"{BF16}/resumed"], runs["reference"]
    assert {p.dtype for p in bf16["params"].values()} == {torch.bfloat16}
    _assert_steps_close(bf16["steps"], reference["steps"], ("actor/pg_loss", "grad_norm"), rtol=BF16_RTOL, atol=1e-3)
    assert _max_param_diff(bf16["params"], reference["params"]) < BF16_PARAM_ATOL
    _assert_steps_close(resumed["steps"], bf16["steps"][1:], LOSS_KEYS, rtol=0, atol=0)
    assert _max_param_diff(resumed["params"], bf16["params"]) == 0
