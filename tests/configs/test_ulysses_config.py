"""model_args.ulysses_size (ROLL's Ulysses sequence parallelism, built for fsdp2_train / fsdp2_infer): the
data-parallel size it leaves, and the configs it refuses with the key named (the 2-rank runs are in
tests/strategies/test_ulysses.py)."""

import pytest

from roll.configs import ConfigError
from roll.pipeline.rlvr.config import load_rlvr_config
from roll.pipeline.rlvr.config_checks import batch_plan
from tests.configs.test_roll_compat import rlvr_dict


def fsdp2_config(ulysses_size, ranks=4, strategy="fsdp2_train", **worker):
    data = rlvr_dict(num_gpus_per_node=ranks)
    train = data["actor_train"]
    train["strategy_args"] = {"strategy_name": strategy}
    train["device_mapping"] = list(range(ranks))
    train["model_args"]["ulysses_size"] = ulysses_size
    train["training_args"] = {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 1}
    train.update(worker)
    return data


@pytest.mark.parametrize("size,dp", [(None, 4), (1, 4), (2, 2), (4, 1)])
def test_ulysses_groups_divide_the_data_parallel_size(size, dp):
    config = load_rlvr_config(fsdp2_config(size))
    assert batch_plan(config).dp_size["actor_train"] == dp


@pytest.mark.parametrize(
    "size,extra,message",
    [
        (3, {}, "model_args.ulysses_size=3 does not divide the role's 4 ranks"),
        (0, {}, "ulysses_size"),
        (2, {"strategy": "deepspeed_train"}, "'actor_train.model_args.ulysses_size' = 2: strategy 'deepspeed_train'"),
    ],
)
def test_ulysses_config_errors_name_the_key(size, extra, message):
    strategy = extra.pop("strategy", "fsdp2_train")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_rlvr_config(fsdp2_config(size, strategy=strategy, **extra))


def test_model_heads_must_split_over_the_group():
    from transformers import Qwen2Config

    from roll.strategies.ulysses import check_model

    check_model(2, Qwen2Config(num_attention_heads=4, num_key_value_heads=2))
    check_model(4, Qwen2Config(num_attention_heads=4, num_key_value_heads=2))  # KV heads repeated to 4
    with pytest.raises(ValueError, match="ulysses_size=3: the model's 4 attention heads do not split"):
        check_model(3, Qwen2Config(num_attention_heads=4, num_key_value_heads=2))
    with pytest.raises(ValueError, match="ulysses_size=2: the model's 3 key/value heads"):
        check_model(2, Qwen2Config(num_attention_heads=6, num_key_value_heads=3))
    sliding = Qwen2Config(num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True, sliding_window=8)
    with pytest.raises(ValueError, match="sliding_attention"):
        check_model(2, sliding)


@pytest.mark.parametrize(
    "fsdp_size,group", [(None, None), (-1, None), (1, None), (8, None), (16, None), (4, 4), (2, 2)]
)
def test_fsdp_size_is_rolls_hybrid_sharding_group(fsdp_size, group):
    """ROLL (fsdp2_strategy.create_device_mesh_with_ep): fsdp_size ≤ 1 or ≥ the world = one shard group of all
    ranks; in between a (world / fsdp_size, fsdp_size) mesh, sharded on the inner dimension."""
    from roll.strategies.fsdp2_train import resolve_fsdp2_config

    assert resolve_fsdp2_config({"fsdp_size": fsdp_size}, "float32", 8)["shard_group"] == group


def test_fsdp_size_must_divide_the_world():
    from roll.strategies.fsdp2_train import resolve_fsdp2_config

    with pytest.raises(ValueError, match="fsdp_size=3: expected an integer that divides the role's 8 ranks"):
        resolve_fsdp2_config({"fsdp_size": 3}, "float32", 8)
