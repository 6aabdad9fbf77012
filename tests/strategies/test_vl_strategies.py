"""Training strategies with images (tests/strategies/vl_scenarios.py): DeepSpeed ZeRO-2 and FSDP2 on 2 gloo ranks
train a tiny Qwen2-VL like one plain PyTorch process running HF's own forward (data parallelism 2 = 1), with
per-row variable-size pixel values dispatched by data-parallel rank; micro-batch 1 × accumulation 8 = 4 × 2;
dynamic batching with sequence packing; save → load → continue = uninterrupted; freeze_module_prefix freezes the
vision tower; LoRA trains the language model only; the weight sync's hf_infer receiver holds the same weights
(checksum) and scores the same.

All scenarios run in one 2-rank launch. Tolerances as tests/strategies/test_train_strategies.py: losses, grad
norm and lr rtol 1e-5 (atol 1e-6); parameters max |Δ| < 2e-5; resumed vs uninterrupted bit-identical.
"""

import pytest
import torch

from tests.strategies import harness as h
from tests.strategies import vl_scenarios as vs

LOSS_RTOL, LOSS_ATOL, PARAM_ATOL = 1e-5, 1e-6, 2e-5
FSDP2 = {"reshard_after_forward": True}
# rows hold 9..26 real tokens, 8 per rank and step: 60 makes 3 or 4 training micro-batches instead of 2
PACKED = {
    "use_dynamic_batching_in_train": True,
    "max_tokens_per_microbatch_in_train": 60,
    "use_dynamic_batching_in_infer": True,
    "max_tokens_per_microbatch_in_infer": 40,
    "use_sequence_packing": True,
}
LORA = {"lora_target": "all-linear", "lora_rank": 4, "lora_alpha": 8, "lora_dropout": 0.0}


def scenarios() -> list[dict]:
    return [
        vs.vl_scenario("ds_zero2", "deepspeed_train", h.ds_config(2), save_after=1, sync=True),
        vs.vl_scenario("ds_zero2/resumed", "deepspeed_train", h.ds_config(2), resume_from="ds_zero2"),
        vs.vl_scenario("fsdp2", "fsdp2_train", FSDP2, sync=True),
        vs.vl_scenario("fsdp2/micro1_acc8", "fsdp2_train", FSDP2, micro=1, accumulation=8),
        vs.vl_scenario("fsdp2/dynamic_packed", "fsdp2_train", FSDP2, worker=PACKED),
        vs.vl_scenario(
            "ds_zero2/frozen_vision", "deepspeed_train", h.ds_config(2), model_args={"freeze_module_prefix": vs.VISION}
        ),  # fmt: skip
        vs.vl_scenario("fsdp2/lora", "fsdp2_train", FSDP2, model_args=LORA),
        vs.vl_scenario("fsdp2/text_only_shard", "fsdp2_train", FSDP2, text_only_rank=1),
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("vl_strategies")
    model_dir, data_file = vs.prepare_vl(workdir)
    results = h.launch(scenarios(), model_dir, data_file, workdir, timeout=600)
    return {"results": results, "model_dir": model_dir, "data_file": data_file, "workdir": workdir}


@pytest.fixture(scope="module")
def plain(runs):
    return vs.plain_vl_reference(runs["model_dir"], runs["data_file"])


# micro-batch means (ppo_kl) differ when the micro-batches do: compared only where they are the plain loop's
LOSS_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "grad_norm", "lr")
SAME_MICRO_KEYS = LOSS_KEYS + ("actor/ppo_kl", "actor/pg_clipfrac")


def assert_same_training(run: dict, reference: dict, params=True, keys=LOSS_KEYS) -> None:
    for ours, theirs in zip(run["steps"], reference["steps"], strict=True):
        for key in keys:
            assert ours[key] == pytest.approx(theirs[key], rel=LOSS_RTOL, abs=LOSS_ATOL), key
    if params:
        for name, value in reference["params"].items():
            assert (run["params"][name] - value).abs().max() < PARAM_ATOL, name


@pytest.mark.parametrize("name", ["ds_zero2", "fsdp2", "fsdp2/micro1_acc8", "fsdp2/dynamic_packed"])
def test_vl_training_equals_one_plain_process(runs, plain, name):
    """2 ranks (DP 2) = one process (DP 1); micro 4 × 2 = 1 × 8; dynamic packed micro-batches = fixed padded ones."""
    run = runs["results"][name]
    assert_same_training(run, plain, keys=SAME_MICRO_KEYS if name in ("ds_zero2", "fsdp2") else LOSS_KEYS)
    assert any(name.startswith("model.visual.") for name in run["params"])
    patch = "model.visual.patch_embed.proj.weight"
    assert (run["params"][patch] - vs_initial(runs)[patch]).abs().max() > 0  # the vision tower trains too


def test_dynamic_packing_regroups_the_micro_batches(runs):
    counts = runs["results"]["fsdp2/dynamic_packed"]["micro_counts"]
    assert counts and all(count > 2 for count in counts), counts


def test_resume_from_a_vl_checkpoint_is_bit_identical(runs):
    results = runs["results"]
    resumed, whole = results["ds_zero2/resumed"], results["ds_zero2"]
    assert resumed["first_step"] == 1 and resumed["steps"] == whole["steps"][1:]
    for name, value in whole["params"].items():
        assert torch.equal(resumed["params"][name], value), name
    # the checkpoint's HF copy loads as the whole VL model with its processor (image processor, chat template)
    from roll.models.vl import load_processor, load_vl_model

    hf_dir = runs["workdir"] / "ds_zero2" / "hf"
    assert {"processor_config.json", "chat_template.jinja"} <= set(whole["hf_files"])
    assert type(load_processor(hf_dir)).__name__ == "Qwen2VLProcessor"
    assert type(load_vl_model(hf_dir, torch.float32)).__name__ == "Qwen2VLForConditionalGeneration"


def test_freeze_module_prefix_freezes_the_vision_tower(runs, plain):
    run = runs["results"]["ds_zero2/frozen_vision"]
    assert run["trainable"] and not [name for name in run["trainable"] if name.startswith(vs.VISION)]
    initial = vs_initial(runs)
    for name, value in run["params"].items():
        changed = (value - initial[name]).abs().max() > 0
        assert changed != name.startswith(vs.VISION), name
    assert_same_training(run, vs.plain_vl_reference(runs["model_dir"], runs["data_file"], frozen=(vs.VISION,)))


def test_lora_trains_the_language_model_only(runs):
    run = runs["results"]["fsdp2/lora"]
    assert run["trainable"] and all("lora_" in name and "language_model" in name for name in run["trainable"])
    initial = vs_initial(runs)
    assert set(run["params"]) == set(initial)  # the sync sends merged HF-named weights
    for name, value in run["params"].items():
        changed = (value - initial[name]).abs().max() > 0
        assert changed == ("language_model" in name and name.endswith("proj.weight")), name


@pytest.mark.parametrize("name", ["ds_zero2", "fsdp2"])
def test_weight_sync_of_the_whole_vl_model(runs, name):
    """The hf_infer receiver of the trained weights (vision tower included) has the trainer's checksum and scores
    the trainer's log-probs."""
    run = runs["results"][name]
    assert run["receiver_checksum"] == pytest.approx(run["checksum"], rel=1e-12)
    trainer = torch.cat(run["log_probs"])
    assert (run["receiver_log_probs"] - trainer).abs().max() < 1e-5


def test_a_rank_without_images_is_refused_instead_of_hanging(runs):
    """One rank's micro-batches without images next to another's with: FSDP2 would gather the vision tower's
    weights on one rank only. Every rank raises, naming the forward."""
    errors = runs["results"]["fsdp2/text_only_shard"]["errors"]
    assert errors[0].startswith("VL forward 0 of 2: rank 0 has images in it while another rank has none")
    assert errors[1].startswith("VL forward 0 of 2: rank 1 has no image in it while another rank has some")


_INITIAL = {}


def vs_initial(runs) -> dict:
    if "params" not in _INITIAL:
        from roll.models.vl import load_vl_model

        model = load_vl_model(runs["model_dir"], torch.float32)
        _INITIAL["params"] = {name: p.detach().clone() for name, p in model.named_parameters()}
    return _INITIAL["params"]
