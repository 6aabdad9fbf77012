"""LoRA on the training strategies (DeepSpeed ZeRO-0/2/3, FSDP2; 2 gloo ranks, one launch of
tests/strategies/lora_scenarios.py): only adapters train and the optimizer holds only them, the frozen base
stays bit-identical, training equals a plain single-process peft loop, resume from a LoRA checkpoint is
bit-identical to the uninterrupted run, the merged weights (weight sync) and the merged HF export score like
the adapter model, and adapters-disabled reference log-probs equal a separate frozen reference's.

Each engine uses another `lora_target` form (ROLL's: all-linear, a comma-separated list, a regex).
Tolerances (float32): against the plain loop as in test_train_strategies.py (losses rtol 1e-5, parameters
2e-5); resume atol 0; merged vs adapter log-probs 1e-5 (the issue's bar).
"""

import pytest
import torch

from tests.strategies import harness as h
from tests.strategies import lora_scenarios as ls
from tests.strategies import offload_probe

ENGINES = {  # name: (strategy, strategy_config, lora_target, gradient checkpointing)
    "ds_zero0": ("deepspeed_train", h.ds_config(0), "all-linear", False),
    "ds_zero1": ("deepspeed_train", h.ds_config(1), "q_proj,v_proj", False),
    "ds_zero2": ("deepspeed_train", h.ds_config(2), "q_proj,k_proj,v_proj,o_proj", False),
    "ds_zero3": ("deepspeed_train", h.ds_config(3), "all-linear", True),
    "fsdp2": ("fsdp2_train", {"reshard_after_forward": True}, r".*\.(q_proj|v_proj|up_proj|down_proj)", True),
}
OFFLOADED = ("ds_zero0", "ds_zero2", "ds_zero3", "fsdp2")  # watched by offload_probe (round_trips)
LOSS_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "grad_norm", "lr")


def scenarios() -> list[dict]:
    out = []
    for name, (strategy, config, target, checkpointing) in ENGINES.items():
        common = dict(gradient_checkpointing=checkpointing)
        out.append(ls.lora_scenario(name, strategy, config, target, save_after=1, **common))
        out.append(ls.lora_scenario(f"{name}/resumed", strategy, config, target, resume_from=name, **common))
        if name in OFFLOADED:
            out.append(ls.lora_scenario(f"{name}/offload", strategy, config, target, offload=True, **common))
    return out


@pytest.fixture(scope="module")
def lora_runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("lora_strategies")
    model_dir, data_file = h.prepare(workdir)
    targets = {target for _, _, target, _ in ENGINES.values()}
    references = {target: ls.plain_lora_reference(model_dir, data_file, target) for target in targets}
    results = h.launch(scenarios(), model_dir, data_file, workdir)
    failed = {name: r["error"] for name, r in results.items() if "error" in r}
    assert not failed, failed
    return {
        "results": results,
        "references": references,
        "model_dir": model_dir,
        "data_file": data_file,
        "workdir": workdir,
    }


def _log_probs(model, tensors):
    from roll.utils.functional import response_log_probs, slice_response_logits

    batch = h.as_proto(tensors, slice(0, 10))
    with torch.no_grad():
        logits = model(**{k: batch.batch[k] for k in ("input_ids", "attention_mask", "position_ids")}).logits
    responses = batch.batch["responses"]
    return (
        response_log_probs(slice_response_logits(logits, responses.shape[1]), responses) * batch.batch["response_mask"]
    )


def _hf_model(path, state=None):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    if state is not None:
        model.load_state_dict(state)
    return model


@pytest.mark.parametrize("name", list(ENGINES))
def test_only_adapters_train(lora_runs, name):
    """Trainable = the adapter matrices; the optimizer steps only their elements; after 3 steps every base
    weight is bit-identical and every adapter's B has moved (B starts at zero)."""
    result = lora_runs["results"][name]
    assert result["trainable"] and all(".lora_A." in n or ".lora_B." in n for n in result["trainable"])
    adapter_numel = sum(result["before"][n].numel() for n in result["trainable"])
    base_numel = sum(t.numel() for n, t in result["before"].items() if n not in result["trainable"])
    assert adapter_numel < base_numel / 5
    # ZeRO-0 keeps a whole copy per rank; ZeRO-2/3 flatten (and may pad) partitions and FSDP2 holds local
    # shards: over the ranks, the adapters once
    held = result["optimizer_numel"]
    if name == "ds_zero0":
        assert held == [adapter_numel] * h.WORLD_SIZE
    else:
        assert adapter_numel <= sum(held) <= adapter_numel + 64 * h.WORLD_SIZE, (held, adapter_numel)
    before, after = result["before"], result["after"]
    assert sorted(before) == sorted(after)
    for param_name in before:
        if param_name in result["trainable"]:
            continue
        assert torch.equal(before[param_name], after[param_name]), param_name
    moved = [n for n in result["trainable"] if ".lora_B." in n and not torch.equal(before[n], after[n])]
    assert len(moved) == len([n for n in result["trainable"] if ".lora_B." in n])


@pytest.mark.parametrize("name", list(ENGINES))
def test_equivalent_to_plain_peft_loop(lora_runs, name):
    """Same losses and adapters as single-process peft + AdamW: the engines train rank 0's initial adapters
    (each rank draws its own), average gradients and clip over the adapters only."""
    target = ENGINES[name][2]
    result, reference = lora_runs["results"][name], lora_runs["references"][target]
    assert len(result["steps"]) == len(reference["steps"])
    for got, want in zip(result["steps"], reference["steps"]):
        for key in LOSS_KEYS:
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), (key, got[key], want[key])
    diff = max((result["after"][n] - reference["params"][n]).abs().max().item() for n in reference["params"])
    assert diff < 2e-5


@pytest.mark.parametrize("name", list(ENGINES))
def test_resume_from_lora_checkpoint_is_bit_identical(lora_runs, name):
    uninterrupted, resumed = lora_runs["results"][name], lora_runs["results"][f"{name}/resumed"]
    assert resumed["first_step"] == 1 and len(resumed["steps"]) == h.STEPS - 1
    for got, want in zip(resumed["steps"], uninterrupted["steps"][1:]):
        for key in LOSS_KEYS:
            assert got[key] == want[key], key
    for param_name, tensor in uninterrupted["after"].items():
        assert torch.equal(resumed["after"][param_name], tensor), param_name
    # the engine checkpoint holds the adapters only; adapter/ is a peft adapter folder
    checkpoint = lora_runs["workdir"] / name
    sizes = sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file() and "hf" not in p.parts)
    hf_size = (checkpoint / "hf" / "model.safetensors").stat().st_size
    assert sizes < hf_size, (sizes, hf_size)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (checkpoint / "adapter").iterdir()}


@pytest.mark.parametrize("name", list(ENGINES))
def test_merged_weights_score_like_the_adapter_model(lora_runs, name):
    """named_hf_parameters (the weight sync) has the base model's HF names and, loaded into a plain HF
    model, scores like the trainer's adapter model; so does the merged HF export of the checkpoint."""
    result = lora_runs["results"][name]
    batch0 = torch.load(lora_runs["data_file"])[0]
    plain = _hf_model(lora_runs["model_dir"])
    assert sorted(result["merged"]) == sorted(n for n, _ in plain.named_parameters())
    synced = _log_probs(_hf_model(lora_runs["model_dir"], result["merged"]), batch0)
    assert (synced - torch.cat(result["log_probs"])).abs().max().item() <= 1e-5
    exported = _log_probs(_hf_model(lora_runs["workdir"] / name / "hf"), batch0)
    assert (exported - torch.cat(result["saved_log_probs"])).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", list(ENGINES))
def test_reference_from_disabled_adapters_equals_frozen_reference(lora_runs, name):
    """After training, the actor with adapters disabled scores exactly like a separate frozen base model
    (what a `reference` role would compute), while the adapter model itself has moved away from it."""
    result = lora_runs["results"][name]
    frozen = _log_probs(_hf_model(lora_runs["model_dir"]), torch.load(lora_runs["data_file"])[0])
    reference = torch.cat(result["reference_log_probs"])
    assert (reference - frozen).abs().max().item() <= 1e-5
    assert (torch.cat(result["log_probs"]) - frozen).abs().max().item() > 1e-3


def test_adapter_checkpoint_loads_as_adapter_name_or_path(lora_runs):
    """adapter/ of a checkpoint continues training through model_args.adapter_name_or_path: peft loads it
    onto the base model and scores like the exported merged model."""
    from peft import PeftModel

    checkpoint = lora_runs["workdir"] / "fsdp2"
    model = PeftModel.from_pretrained(_hf_model(lora_runs["model_dir"]), str(checkpoint / "adapter")).eval()
    batch0 = torch.load(lora_runs["data_file"])[0]
    exported = _log_probs(_hf_model(checkpoint / "hf"), batch0)
    assert (_log_probs(model, batch0) - exported).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", list(ENGINES))
def test_adapter_export_for_adapter_only_sync(lora_runs, name):
    """named_adapter_parameters: the gathered adapter matrices under peft's saved names, equal to the trained
    ones; adapter_config is the peft config (rank 4, alpha 8, the target); the checksum is theirs."""
    from roll.strategies.train_common import checksum

    result = lora_runs["results"][name]
    expected = {n.replace(".default.", "."): t for n, t in result["after"].items() if n in result["trainable"]}
    assert sorted(result["adapter"]) == sorted(expected)
    assert all(torch.equal(result["adapter"][n], expected[n]) for n in expected)
    assert result["adapter_checksum"] == pytest.approx(checksum(expected.items()), rel=1e-12)
    config = result["adapter_config"]
    assert (config["r"], config["lora_alpha"], config["peft_type"]) == (4, 8, "LORA")


def test_adapter_name_or_path_continues_from_a_checkpoint_adapter(lora_runs):
    """model_args.adapter_name_or_path: apply_lora loads the checkpoint's adapter/ trainable (its own config
    sets target and rank) and the model scores like the checkpoint's merged export."""
    from roll.configs.worker import ModelArgs
    from roll.strategies.lora import apply_lora

    checkpoint = lora_runs["workdir"] / "ds_zero2"
    args = ModelArgs(model_name_or_path=str(lora_runs["model_dir"]), adapter_name_or_path=str(checkpoint / "adapter"))
    model = apply_lora(_hf_model(lora_runs["model_dir"]), args).eval()
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == {"q_proj", "k_proj", "v_proj", "o_proj"}  # ds_zero2's target
    batch0 = torch.load(lora_runs["data_file"])[0]
    exported = _log_probs(_hf_model(checkpoint / "hf"), batch0)
    assert (_log_probs(model, batch0) - exported).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", OFFLOADED)
def test_offload_reload_leaves_lora_training_unchanged(lora_runs, name):
    plain, offloaded = lora_runs["results"][name], lora_runs["results"][f"{name}/offload"]
    for got, want in zip(offloaded["steps"], plain["steps"]):
        for key in LOSS_KEYS:
            assert got[key] == want[key], key
    assert all(torch.equal(offloaded["after"][n], t) for n, t in plain["after"].items())


@pytest.mark.parametrize("name", OFFLOADED)
def test_offload_moves_adapters_frozen_base_and_optimizer_state(lora_runs, name):
    """offload_probe: the frozen base weights move as well as the adapters and their AdamW state."""
    offload_probe.assert_every_tensor_moved(lora_runs["results"][f"{name}/offload"]["round_trips"])
