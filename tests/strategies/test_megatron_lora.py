"""LoRA on megatron_train (roll/strategies/megatron/lora.py): TP1 × DP2 and TP2 on 2 gloo ranks, float32, in the
session's megatron launch (conftest.py), all-linear adapters (rank 4, alpha 8) on megatron's fused linears.

Checked: only the adapters require gradients and the optimizer holds only them; after 3 steps every base weight
is bit-identical and every B moved; with B = 0 the adapter model's log-probs equal the adapters-off ones
(bit-identical) and the HF base model's (1e-5); training equals a single-process HF loop with the same fused
adapters (losses rtol 1e-5, merged weights 2e-5: strategy-vs-reference invariance, as test_megatron_train.py);
the merged weights (weight sync) and the merged `hf/` export score like the adapter model (1e-5); the reference
log-probs at the end (adapters off) still equal the base model's; resume from an adapter checkpoint and an
offload round trip are bit-identical to the uninterrupted run (TP1 × DP2). At TP2 the adapters are split as their
base layers (column-parallel: B by rows, row-parallel: A by columns): same losses, grad norms and merged weights
as the reference (without the TP sum of A·x's gradient the step-2 grad norm is off by 3.5e-5 relative). TP2 with
sequence_parallel (the adapters gather / reduce-scatter over the sequence as their base layers do) is held to the
same reference and tolerances (without the TP sum of the whole factor's and the norms' gradients its grad norm is
off by 11%).
"""

import pytest
import torch

from tests.strategies import harness as h
from tests.strategies import megatron_lora_scenarios as mls
from tests.strategies import offload_probe
from tests.strategies.test_lora_strategies import LOSS_KEYS, _hf_model, _log_probs

RUN = "megatron_lora"
TP2 = "megatron_lora_tp2"  # the adapters split as the base layers; both ranks train all 16 rows (DP 1)
TP2_SP = "megatron_lora_tp2_sp"  # the same with sequence parallelism (ROLL's qwen3-30BA3B LoRA example sets it)


def scenarios() -> list[dict]:
    return [
        mls.scenario(RUN, save_after=1),
        mls.scenario(f"{RUN}/resumed", resume_from=RUN),
        mls.scenario(f"{RUN}/offload", offload=True),
        mls.scenario(TP2, config={"tensor_model_parallel_size": 2}, accumulation=4),
        mls.scenario(TP2_SP, config={"tensor_model_parallel_size": 2, "sequence_parallel": True}, accumulation=4),
    ]


@pytest.fixture(scope="module")
def runs(megatron_runs):
    results = megatron_runs["results"]
    reference = mls.plain_fused_lora_reference(
        megatron_runs["model_dir"], megatron_runs["data_file"], results[RUN]["before"]
    )
    return {**megatron_runs, "reference": reference}


def _batch0_log_probs(runs, model):
    return _log_probs(model, torch.load(runs["data_file"])[0])


@pytest.mark.parametrize("name", [RUN, TP2, TP2_SP])
def test_only_adapters_train(runs, name):
    """(TP2: each rank's shards; the optimizer holds this rank's adapter shards)"""
    result = runs["results"][name]
    assert result["trainable"] and all(n.endswith((".lora.A", ".lora.B")) for n in result["trainable"])
    assert len(result["trainable"]) == 2 * 4 * 2  # A and B × 4 linears × 2 layers
    adapter_numel = sum(result["before"][n].numel() for n in result["trainable"])
    assert result["optimizer_numel"] == [adapter_numel] * h.WORLD_SIZE
    before, after = result["before"], result["after"]
    assert sorted(before) == sorted(after)
    for name in before:
        if name not in result["trainable"]:
            assert torch.equal(before[name], after[name]), name
    for name in result["trainable"]:
        if name.endswith(".lora.B"):
            assert not before[name].any() and after[name].abs().max() > 0, name


@pytest.mark.parametrize("name", [RUN, TP2, TP2_SP])
def test_zero_b_forward_equals_base(runs, name):
    result = runs["results"][name]
    initial = torch.cat(result["initial_log_probs"])
    assert torch.equal(initial, torch.cat(result["initial_reference_log_probs"]))
    base = _batch0_log_probs(runs, _hf_model(runs["model_dir"]))
    assert (initial - base).abs().max().item() <= 1e-5
    # adapters off after training: still the frozen base (the reference log-probs of a LoRA actor)
    assert (torch.cat(result["reference_log_probs"]) - base).abs().max().item() <= 1e-5
    assert (torch.cat(result["log_probs"]) - base).abs().max().item() > 1e-4  # the adapters do change the policy


@pytest.mark.parametrize("name", [RUN, TP2, TP2_SP])
def test_equivalent_to_plain_fused_lora_loop(runs, name):
    """TP2 draws the same whole A's as TP1 (rank 0's, then split), so one reference serves both."""
    result, reference = runs["results"][name], runs["reference"]
    assert len(result["steps"]) == len(reference["steps"]) == h.STEPS
    for got, want in zip(result["steps"], reference["steps"]):
        for key in LOSS_KEYS:
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), (key, got[key], want[key])
    assert sorted(result["merged"]) == sorted(reference["merged"])
    diff = max((result["merged"][n] - reference["merged"][n]).abs().max().item() for n in reference["merged"])
    assert diff < 2e-5


@pytest.mark.parametrize("name", [RUN, TP2, TP2_SP])
def test_merged_weights_score_like_the_adapter_model(runs, name):
    result = runs["results"][name]
    synced = _batch0_log_probs(runs, _hf_model(runs["model_dir"], result["merged"]))
    assert (synced - torch.cat(result["log_probs"])).abs().max().item() <= 1e-5
    if name != RUN:
        return
    exported = _batch0_log_probs(runs, _hf_model(runs["workdir"] / RUN / "hf"))
    assert (exported - torch.cat(result["saved_log_probs"])).abs().max().item() <= 1e-5


def test_resume_from_adapter_checkpoint_is_bit_identical(runs):
    uninterrupted, resumed = runs["results"][RUN], runs["results"][f"{RUN}/resumed"]
    assert resumed["first_step"] == 1 and len(resumed["steps"]) == h.STEPS - 1
    for got, want in zip(resumed["steps"], uninterrupted["steps"][1:]):
        for key in LOSS_KEYS:
            assert got[key] == want[key], key
    for name, tensor in uninterrupted["after"].items():
        assert torch.equal(resumed["after"][name], tensor), name
    # the per-rank files hold the adapters only (the frozen base is model_name_or_path)
    checkpoint = runs["workdir"] / RUN
    rank_files = sum(p.stat().st_size for p in (checkpoint / "megatron").iterdir())
    assert rank_files < (checkpoint / "hf" / "model.safetensors").stat().st_size


def test_offload_round_trip_is_bit_identical(runs):
    plain, offloaded = runs["results"][RUN], runs["results"][f"{RUN}/offload"]
    offload_probe.assert_every_tensor_moved(offloaded["round_trips"], gradients=True)
    for got, want in zip(offloaded["steps"], plain["steps"]):
        for key in LOSS_KEYS:
            assert got[key] == want[key], key
    for name, tensor in plain["after"].items():
        assert torch.equal(offloaded["after"][name], tensor), name
