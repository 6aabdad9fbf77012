"""Single-process checks of the training strategies' configuration and shared helpers (no engines)."""

import pytest
import torch

from roll.configs.worker import TrainingArgs
from roll.distributed.data_proto import DataProto
from roll.strategies import create_strategy
from roll.strategies.deepspeed_train import resolve_ds_config, resolve_ds_infer_config
from roll.strategies.fsdp2_train import FSDP2_DEFAULTS, WRAP_EXTRA_DEFAULTS, resolve_fsdp2_config
from roll.strategies.train_common import aligned_micro_batches, gradient_clip_value, lr_lambda, split_train_batch
from tests.strategies.harness import StandInWorker, ds_config, make_worker_config


def test_fsdp2_defaults_and_auto_param_dtype():
    defaults = {**FSDP2_DEFAULTS, **WRAP_EXTRA_DEFAULTS, "param_dtype": "float32", "shard_group": None}
    assert resolve_fsdp2_config(None, "float32") == defaults
    assert resolve_fsdp2_config({}, "bfloat16")["param_dtype"] == "bfloat16"
    config = resolve_fsdp2_config(
        {"reshard_after_forward": False, "param_dtype": "bfloat16", "wrap_modules": ["Qwen2DecoderLayer"]}, "float32"
    )
    assert config["reshard_after_forward"] is False and config["param_dtype"] == "bfloat16"


def test_fsdp2_unknown_key_lists_the_valid_ones():
    with pytest.raises(ValueError) as error:
        resolve_fsdp2_config({"reshard_after_foward": True}, "float32")
    message = str(error.value)
    assert "reshard_after_foward" in message
    assert all(key in message for key in FSDP2_DEFAULTS)


def test_fsdp2_accepts_rolls_apply_expert_patch_with_a_note():
    """ROLL's apply_fsdp2 turns apply_expert_patch off itself on transformers >= 5.2.0 (fused experts): roll,
    on transformers 5.x, takes it (either value) with a logged note and changes nothing."""
    import logging

    import transformers
    from packaging import version

    assert version.parse(transformers.__version__) >= version.parse("5.2.0")
    notes = []
    handler = logging.Handler()  # roll's loggers do not propagate, so caplog would miss the note
    handler.emit = lambda record: notes.append(record.getMessage())
    logger = logging.getLogger("roll.strategies.fsdp2_train")
    logger.addHandler(handler)
    try:
        for value in (True, False):
            config = resolve_fsdp2_config({"apply_expert_patch": value}, "float32")
            # only ROLL's moe_experts guard reads it (tests/strategies/test_fsdp2_units.py)
            assert config.pop("expert_patch") is value
            default = resolve_fsdp2_config(None, "float32")
            default.pop("expert_patch")
            assert config == default
    finally:
        logger.removeHandler(handler)
    assert len(notes) == 2 and all("apply_expert_patch is ignored" in n and "5.2.0" in n for n in notes)


def test_fsdp2_refuses_a_deepspeed_block_with_a_hint():
    with pytest.raises(ValueError, match="strategy_config to null"):
        resolve_fsdp2_config(ds_config(2), "float32")


@pytest.mark.parametrize(
    "bad",
    [
        {"param_dtype": "fp8"},
        {"reduce_dtype": "half"},
        {"cpu_offload": "yes"},
        {"reshard_after_forward": 1},
        {"wrap_modules": "Qwen2DecoderLayer"},
    ],
)
def test_fsdp2_bad_values(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        resolve_fsdp2_config(bad, "float32")


def test_deepspeed_train_config_takes_batch_keys_from_training_args():
    args = TrainingArgs(per_device_train_batch_size=4, gradient_accumulation_steps=2, max_grad_norm=0.5)
    config = resolve_ds_config(ds_config(3), args, world_size=2, dtype="float32")
    assert (
        config["train_micro_batch_size_per_gpu"],
        config["gradient_accumulation_steps"],
        config["train_batch_size"],
        config["gradient_clipping"],
    ) == (4, 2, 16, 0.5)
    assert config["bf16"]["enabled"] is False and config["fp16"]["enabled"] is False
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        resolve_ds_config({**ds_config(2), "gradient_accumulation_steps": 3}, args, world_size=2, dtype="float32")
    with pytest.raises(ValueError, match="optimizer"):
        resolve_ds_config({**ds_config(2), "optimizer": {"type": "Adam"}}, args, world_size=2, dtype="float32")


def test_deepspeed_infer_config_resolves_the_shipped_auto_keys():
    """The shipped blocks say "auto" everywhere; DeepSpeed itself rejects "auto" (and "auto" × 2 used to
    become the string "autoauto" as train_batch_size)."""
    config = resolve_ds_infer_config(ds_config(3), world_size=2, dtype="bfloat16")
    assert (
        config["train_micro_batch_size_per_gpu"],
        config["gradient_accumulation_steps"],
        config["train_batch_size"],
        config["gradient_clipping"],
    ) == (1, 1, 2, 0.0)
    assert config["bf16"]["enabled"] is True and config["fp16"]["enabled"] is False
    assert "auto" not in repr(config)
    assert resolve_ds_infer_config(None, world_size=1, dtype="float32")["train_batch_size"] == 1


def test_lr_schedule():
    linear = lr_lambda("linear", warmup_steps=2, total_steps=6)
    assert [linear(step) for step in range(7)] == pytest.approx([1 / 3, 2 / 3, 1.0, 0.75, 0.5, 0.25, 0.0])
    cosine = lr_lambda("cosine", warmup_steps=0, total_steps=4)
    assert [cosine(step) for step in range(5)] == pytest.approx([1.0, 0.8535534, 0.5, 0.1464466, 0.0])
    assert lr_lambda("constant", 0, 10)(7) == 1.0
    with pytest.raises(ValueError, match="lr_scheduler_type"):
        lr_lambda("step", 0, 10)
    assert gradient_clip_value(1.0) == 1.0 and gradient_clip_value(0) == float("inf")


def test_train_batch_must_be_micro_times_accumulation(tmp_path):
    config = make_worker_config(tmp_path, "fsdp2_train", None, micro=2, accumulation=3, world_size=1)
    batch = DataProto.from_dict(tensors={"x": torch.arange(6)})
    assert [part.batch["x"].tolist() for part in split_train_batch(config, batch)] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="= 6 rows per rank, got 5"):
        split_train_batch(config, batch[slice(0, 5)])


def test_loss_mask_keys_give_every_micro_batch_the_steps_global_counts(tmp_path):
    """SFT/DPO/distillation losses divide by counts over the whole optimizer step (here one rank), and multiply
    by loss_scale = ranks × micro-batches to cancel the engines' averaging; labels_for_loss skips column 0."""
    config = make_worker_config(tmp_path, "fsdp2_train", None, micro=1, accumulation=2, world_size=1)
    labels = torch.tensor([[-100, 5, 6, -100], [7, -100, -100, -100]])
    batch = DataProto.from_dict(tensors={"labels": labels, "labels_for_loss": labels})
    batch.meta_info["loss_mask_keys"] = ["labels", "labels_for_loss", "absent"]
    micros = split_train_batch(config, batch)
    for micro in micros:
        assert micro.meta_info["batch_num_tokens"] == {"labels": 3, "labels_for_loss": 2}
        assert micro.meta_info["global_valid_samples"] == {"default": 2, "labels": 2, "labels_for_loss": 1}
        assert micro.meta_info["loss_scale"] == 2


def test_aligned_micro_batches_single_process():
    batch = DataProto.from_dict(tensors={"x": torch.arange(7)})
    parts = aligned_micro_batches(batch, 3)
    assert [(part.batch["x"].tolist(), keep) for part, keep in parts] == [
        ([0, 1, 2], True),
        ([3, 4, 5], True),
        ([6], True),
    ]


def test_registry_builds_the_fsdp2_strategies(tmp_path):
    from roll.strategies.fsdp2_train import FSDP2InferStrategy, FSDP2TrainStrategy

    for name, cls in (("fsdp2_train", FSDP2TrainStrategy), ("fsdp2_infer", FSDP2InferStrategy)):
        config = make_worker_config(tmp_path, name, None, micro=1, accumulation=1, world_size=1)
        assert type(create_strategy(name, StandInWorker(config, 0, 1))) is cls


def test_fsdp2_takes_rolls_moe_use_grouped_mm_and_refuses_its_expert_parallel_mesh():
    """ROLL's moe_use_grouped_mm selects transformers' grouped_mm experts kernel (a tiny MoE model gives the eager
    kernel's logits with it; a dense model is an error); ep_size / efsdp_size > 1 (ROLL's FSDP2 expert
    parallelism) are refused with the reason, 1 (off) is taken."""
    from types import SimpleNamespace

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    from roll.strategies.fsdp2_train import FSDP2InferStrategy

    assert resolve_fsdp2_config({"moe_use_grouped_mm": True, "ep_size": 1, "efsdp_size": 1}, "float32")[
        "moe_use_grouped_mm"
    ]
    with pytest.raises(ValueError, match="ep_size \\(ROLL's\\) is refused: ROLL's expert parallelism inside FSDP2"):
        resolve_fsdp2_config({"ep_size": 8, "efsdp_size": 1}, "float32")
    with pytest.raises(ValueError, match="moe_use_grouped_mm=1: expected true or false"):
        resolve_fsdp2_config({"moe_use_grouped_mm": 1}, "float32")
    kernel = SimpleNamespace(fsdp_config={"moe_use_grouped_mm": True})
    torch.manual_seed(0)
    shape = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    moe = Qwen3MoeForCausalLM(Qwen3MoeConfig(**shape, num_key_value_heads=2, moe_intermediate_size=16, num_experts=4,
                                              num_experts_per_tok=2)).eval()  # fmt: skip
    ids = torch.tensor([[1, 5, 9, 3]])
    moe.set_experts_implementation("eager")
    eager = moe(input_ids=ids).logits
    FSDP2InferStrategy._with_experts_kernel(kernel, moe)
    assert moe.config._experts_implementation == "grouped_mm"
    torch.testing.assert_close(moe(input_ids=ids).logits, eager, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="Qwen2ForCausalLM has no MoE experts"):
        FSDP2InferStrategy._with_experts_kernel(kernel, Qwen2ForCausalLM(Qwen2Config(**shape)))
