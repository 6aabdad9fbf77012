"""model_args.lora_* (ROLL's keys): validation, the strategies' `lora` capability, the reference choice
(a LoRA actor with adapters disabled vs a reference role) and what --dry_run says about it."""

from pathlib import Path

import pytest

from roll.configs import ConfigError, compose_config, describe_config, reference_source
from roll.pipeline.rlvr.config import load_rlvr_config
from roll.strategies.lora import peft_targets
from roll.utils.patterns import is_regex

TINY = Path(__file__).resolve().parents[2] / "examples" / "tiny_rlvr"
LORA = "+actor_train.model_args.lora_target=all-linear"


def tiny(*overrides, name="rlvr_tiny"):
    return load_rlvr_config(compose_config(str(TINY), name, list(overrides)))


def error_of(*overrides) -> str:
    with pytest.raises(ConfigError) as info:
        tiny(*overrides)
    return str(info.value)


def test_lora_target_forms():
    assert peft_targets("all-linear") == "all-linear"
    assert peft_targets("q_proj, v_proj,o_proj") == ["q_proj", "v_proj", "o_proj"]
    assert peft_targets("q_proj") == ["q_proj"]
    assert peft_targets(r".*\.(q_proj|v_proj)") == r".*\.(q_proj|v_proj)"
    assert is_regex(r"model\.layers\.0\..*") and not is_regex("self_attn.q_proj,mlp.up_proj")


def test_shipped_lora_variant_loads_and_uses_the_actor_as_reference():
    config = tiny(name="rlvr_tiny_lora")
    args = config.actor_train.model_args
    assert args.lora and args.lora_target == "all-linear" and args.resolved_lora_alpha == 8 and args.lora_rank == 4
    assert config.reference is None and reference_source(config) == "actor_train"
    described = describe_config(config)
    assert "reference log-probs: actor_train with its LoRA adapters disabled" in described


def test_lora_actor_replaces_a_reference_role_of_the_same_base_model():
    config = tiny(LORA)
    assert config.reference is not None and reference_source(config) == "actor_train"
    assert "so the reference role is not started" in describe_config(config)
    # another model (or another dtype) as reference: the role is used
    other = tiny(LORA, "reference.model_args.model_name_or_path=./elsewhere")
    assert reference_source(other) == "reference"
    assert "reference log-probs: the reference role (hf_infer, ./elsewhere)" in describe_config(other)


def test_full_fine_tuning_keeps_the_reference_role():
    config = tiny()
    assert reference_source(config) == "reference"
    assert "reference log-probs: the reference role (hf_infer" in describe_config(config)


def test_kl_without_reference_needs_lora():
    message = error_of("reference=null")
    assert "need a 'reference' role; add one, or train actor_train with LoRA" in message
    assert reference_source(tiny("reference=null", "use_kl_loss=false")) is None


@pytest.mark.parametrize(
    "override, expected",
    [
        ("+actor_train.model_args.lora_rank=0", "'actor_train.model_args.lora_rank' = 0: must be ≥ 1"),
        ("+actor_train.model_args.lora_alpha=-1", "'actor_train.model_args.lora_alpha' = -1.0: must be > 0"),
        ("+actor_train.model_args.lora_dropout=1.0", "'actor_train.model_args.lora_dropout' = 1.0: must be in [0, 1)"),
        (r"+actor_train.model_args.lora_target='(q_proj'", "is not a valid regex"),
        ("+actor_train.model_args.lora_target=','", "expected 'all-linear', module names separated by commas"),
        ("+actor_train.model_args.adapter_name_or_path=/nonexistent", "no adapter_config.json there"),
    ],
)
def test_invalid_lora_values_name_the_key(override, expected):
    overrides = [override] if "lora_target" in override or "adapter_name" in override else [LORA, override]
    assert expected in error_of(*overrides)


def test_lora_keys_without_a_target_are_refused():
    message = error_of("+actor_train.model_args.lora_rank=16")
    assert "'actor_train.model_args.lora_rank' is only read with LoRA on" in message


def test_lora_on_a_role_that_does_not_train_the_policy_is_refused():
    message = error_of("+actor_infer.model_args.lora_target=all-linear")
    assert "LoRA is trained by actor_train only" in message and "actor_infer" in message


MEGATRON = ["actor_train.strategy_args.strategy_name=megatron_train", "actor_train.strategy_args.strategy_config=null"]


def test_lora_with_megatron_maps_roll_targets_onto_fused_linears():
    from roll.strategies.megatron.lora import megatron_targets

    tiny(LORA, *MEGATRON)  # accepted (ROLL's megatron LoRA examples: all-linear, TP 1)
    every = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    assert (
        megatron_targets(every)
        == megatron_targets("all-linear")
        == [
            "linear_qkv",
            "linear_proj",
            "linear_fc1",
            "linear_fc2",
        ]
    )
    assert megatron_targets(r".*\.(q_proj|k_proj|v_proj|down_proj)") == ["linear_qkv", "linear_fc2"]
    assert megatron_targets("linear_proj") == ["linear_proj"]


def test_lora_with_megatron_refuses_what_it_cannot_train():
    message = error_of("+actor_train.model_args.lora_target='q_proj,v_proj'", *MEGATRON)
    assert "megatron fuses ['q_proj', 'k_proj', 'v_proj'] into one linear_qkv" in message
    message = error_of(
        LORA,
        "actor_train.strategy_args.strategy_name=megatron_train",
        "actor_train.strategy_args.strategy_config={pipeline_model_parallel_size: 2}",
        "actor_train.device_mapping=[0,1]",
    )
    assert "verified at pipeline_model_parallel_size 1 only" in message
    message = error_of(LORA, *MEGATRON, "+actor_train.model_args.adapter_name_or_path=/nowhere")
    assert "megatron_train cannot load a peft adapter" in message
    message = error_of(LORA, *MEGATRON, "lora_weight_sync=adapter", "actor_infer.strategy_args.strategy_name=vllm")
    assert "actor_train strategy 'megatron_train' cannot export its adapters" in message


def test_only_lora_capable_strategies_declare_it():
    from roll.configs.checks import strategies_with

    assert strategies_with("lora") == ["deepspeed_train", "fsdp2_train", "megatron_train"]


def test_adapter_only_weight_sync_needs_a_lora_actor_and_a_vllm_engine_with_lora():
    assert "needs a LoRA actor_train" in error_of("lora_weight_sync=adapter")
    message = error_of(LORA, "lora_weight_sync=adapter")
    assert "actor_infer strategy 'hf_infer' cannot serve LoRA adapters; use one of ['vllm']" in message
    vllm = [LORA, "lora_weight_sync=adapter", "actor_infer.strategy_args.strategy_name=vllm"]
    assert "strategy_config.enable_lora: true" in error_of(*vllm)
    small = error_of(
        *vllm,
        "+actor_infer.strategy_args.strategy_config={enable_lora: true, max_lora_rank: 8}",
        "+actor_train.model_args.lora_rank=16",
    )
    assert "max_lora_rank' = 8 is below actor_train.model_args.lora_rank = 16" in small
    config = tiny(*vllm, "+actor_infer.strategy_args.strategy_config={enable_lora: true, max_lora_rank: 8}")
    assert config.lora_weight_sync == "adapter"
