"""megatron_train's kernel-fusion flags (roll/strategies/megatron/fusions.py) without a launch: the loader
accepts the flags ROLL's examples set, a flag whose kernel (TransformerEngine / Apex) is missing fails where the
model is built with an error naming the key, and the flags reach megatron-core's TransformerConfig. Training
with the plain-torch fusions on is compared with them off in test_megatron_train.py (tp1_dp2/fused)."""

import pytest

from tests.strategies import megatron_scenarios as ms

KERNEL_FUSIONS = ("apply_rope_fusion", "gradient_accumulation_fusion")


def _tiny_qwen2():
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )


def test_loader_accepts_the_fusions_roll_examples_set():
    """qwen2.5-7B-rlvr_megatron/rlvr_config_async.yaml's actor_train strategy_config (fusion part): refused
    before, though bias_activation_fusion is plain torch and apply_rope_fusion runs wherever TE is installed."""
    from roll.strategies.megatron.config import resolve_megatron_config

    given = {"apply_rope_fusion": True, "bias_activation_fusion": True, "gradient_accumulation_fusion": True}
    config = resolve_megatron_config(given, 1, "bfloat16")
    assert {key: config[key] for key in given} == given
    assert config["bias_dropout_fusion"] is False


@pytest.mark.parametrize("key", KERNEL_FUSIONS)
def test_missing_kernel_is_an_error_naming_the_key(key):
    from roll.strategies.megatron import fusions

    where = "actor_train.strategy_args.strategy_config"
    with pytest.raises(RuntimeError) as error:
        fusions.check_kernels({key: True}, where=where, available=lambda name: False)
    message = str(error.value)
    assert f"{where}.{key}=true needs" in message and f"set {key}: false" in message
    assert ("TransformerEngine >= 1.4" if key == "apply_rope_fusion" else "Apex") in message
    fusions.check_kernels({key: True}, where=where, available=lambda name: True)  # present: no error
    fusions.check_kernels({key: False}, where=where, available=lambda name: False)  # off: nothing needed


def test_transformer_config_checks_kernels_and_passes_flags_through():
    """Built here (no TransformerEngine, no Apex): a kernel fusion fails with roll's error before megatron-core's
    own; the plain-torch fusions reach TransformerConfig as given."""
    ms.require_megatron()
    from roll.strategies.megatron import fusions
    from roll.strategies.megatron.config import resolve_megatron_config
    from roll.strategies.megatron.model import transformer_config

    hf_config = _tiny_qwen2()
    for key in KERNEL_FUSIONS:
        if fusions._kernel_available(key):
            continue  # a machine with the kernel builds it (not this project's CPU machines)
        with pytest.raises(RuntimeError, match=rf"megatron strategy_config\.{key}=true needs .*set {key}: false"):
            transformer_config(hf_config, resolve_megatron_config({key: True}, 1))
    parallel = resolve_megatron_config(dict.fromkeys(fusions.TORCH_FUSIONS, True), 1)
    built = transformer_config(hf_config, parallel)
    assert all(getattr(built, key) is True for key in fusions.TORCH_FUSIONS)
    assert not any(getattr(built, key) for key in (*fusions.KERNEL_FUSIONS, *fusions.REFUSED))
    unfused = transformer_config(hf_config, resolve_megatron_config({}, 1))
    assert not any(getattr(unfused, key) for key in fusions.FUSION_KEYS)
