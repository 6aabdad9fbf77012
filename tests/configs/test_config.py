"""Strict config loading: every bad input names its key and the fix; Hydra composition; dry run."""

from pathlib import Path

import pytest
import yaml

from roll.configs import ConfigError, compose_config
from roll.configs.loader import parse_device_mapping
from roll.pipeline.rlvr.config import load_rlvr_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = EXAMPLES / "tiny_rlvr"


def tiny(*overrides):
    return load_rlvr_config(compose_config(str(TINY), "rlvr_tiny", list(overrides)))


def user_config(tmp_path, data: dict) -> str:
    """A user's config folder `exp/` beside a copy of the shipped `config/` folder; returns exp's path."""
    (tmp_path / "config").mkdir(exist_ok=True)
    for shared in (EXAMPLES / "config").glob("*.yaml"):
        (tmp_path / "config" / shared.name).write_text(shared.read_text())
    (tmp_path / "exp").mkdir(exist_ok=True)
    (tmp_path / "exp" / "user.yaml").write_text(yaml.safe_dump(data))
    return str(tmp_path / "exp")


def error_of(*overrides) -> str:
    with pytest.raises(ConfigError) as info:
        tiny(*overrides)
    return str(info.value)


def test_demo_config_loads_with_derived_values():
    config = tiny()
    assert config.actor_train.name == "actor_train" and config.rewards["math"].name == "rewards.math"
    assert config.actor_train.world_size == 1 and config.actor_infer.device_mapping == [1]
    assert config.actor_infer.generating_args.max_new_tokens == config.response_length
    assert config.actor_infer.generating_args.num_return_sequences == config.num_return_sequences_in_group
    assert config.actor_train.worker_cls == "roll.workers.actor_worker.ActorWorker"
    assert config.actor_train.strategy_args.strategy_config["zero_optimization"]["stage"] == 0


def test_misspelled_key_names_full_path_and_closest_name(tmp_path):
    data = yaml.safe_load((TINY / "rlvr_tiny.yaml").read_text())
    data["actor_train"]["training_args"]["learning_rat"] = data["actor_train"]["training_args"].pop("learning_rate")
    with pytest.raises(ConfigError) as info:
        load_rlvr_config(compose_config(user_config(tmp_path, data), "user"))
    message = str(info.value)
    assert "unknown key 'actor_train.training_args.learning_rat'" in message
    assert "did you mean 'learning_rate'" in message


def test_misspelled_top_level_key_on_the_command_line():
    message = error_of("rollout_batch_sise=8")
    assert "unknown key 'rollout_batch_sise'" in message and "did you mean 'rollout_batch_size'" in message


def test_any_schema_field_can_be_overridden_and_a_misspelled_override_gets_a_suggestion():
    assert tiny("kl_loss_coef=0.5", "actor_train.training_args.warmup_steps=3").kl_loss_coef == 0.5
    message = error_of("actor_train.training_args.learning_rat=1")
    assert (
        "unknown key 'actor_train.training_args.learning_rat'" in message and "did you mean 'learning_rate'" in message
    )
    message = error_of("rewards.math.tag_include=[x]")
    assert "unknown key 'rewards.math.tag_include'" in message and "did you mean 'tag_included'" in message


def test_wrong_types_and_values_list_what_is_allowed():
    assert "'rollout_batch_size' = 'eight' (str): expected an integer" in error_of("rollout_batch_size=eight")
    message = error_of("loss_agg_mode=token_mean")
    assert "'loss_agg_mode' = 'token_mean' is not allowed" in message and "did you mean 'token-mean'" in message
    assert "'use_kl_loss' = 'yes'" in error_of("use_kl_loss=yes")
    assert "'kl_loss_type' = 'full' is not allowed" in error_of("kl_loss_type=full")
    assert tiny("kl_loss_type=k3+").kl_loss_type == "k3+"
    message = error_of("adv_estimator=grpoo")
    assert "'adv_estimator' = 'grpoo'" in message and "gae" in message  # lists the registered estimators
    assert "choose one of ['hf_infer', 'vllm', 'sglang']" in error_of(
        "actor_infer.strategy_args.strategy_name=deepspeed_train"
    )


def test_device_mapping_longer_than_the_devices():
    message = error_of("actor_train.device_mapping='list(range(0, 4))'")  # the example sets num_nodes: 1
    assert "'actor_train.device_mapping' uses device ids [2, 3]" in message
    assert "num_nodes × num_gpus_per_node = 2 devices" in message and "raise num_gpus_per_node" in message
    # num_nodes unset: as many nodes as the largest device id needs (ROLL's rule)
    assert tiny("actor_train.device_mapping='list(range(0, 4))'", "num_nodes=null").num_nodes == 2
    assert tiny("num_nodes=null").num_nodes == 1


def test_batch_sizes_that_do_not_divide():
    message = error_of("actor_train.training_args.per_device_train_batch_size=48")
    assert "32 × 8 = 256 is not a multiple of the global train batch" in message
    assert "48 × 1 × 1 = 48" in message and "change actor_train.training_args or rollout_batch_size" in message


def test_cross_field_errors_say_which_keys_to_change():
    assert "needs a 'critic' role" in error_of("adv_estimator=gae")
    assert tiny("adv_estimator=remax").adv_estimator == "remax"
    assert "need a 'reference' role" in error_of("use_kl_loss=true", "~reference")
    assert "set num_return_sequences_in_group ≥ 2" in error_of(
        "num_return_sequences_in_group=1", "actor_train.training_args.per_device_train_batch_size=32"
    )
    assert "differs from response_length" in error_of("actor_infer.generating_args.max_new_tokens=9")
    assert "'actor_train.name' is set from the role's key" in error_of("+actor_train.name=x")
    assert "'rewards.math.worker_cls' is required" in error_of("~rewards.math.worker_cls")


def test_device_mapping_string_is_parsed_without_eval():
    assert parse_device_mapping("list(range(0, 4))", "x") == [0, 1, 2, 3]
    assert parse_device_mapping("list(range(2,8,2))", "x") == [2, 4, 6]
    assert parse_device_mapping([1, 3], "x") == [1, 3]
    for bad in ("range(0, 4)", "__import__('os').system('true')", "list(range(0, 4, 0))"):
        with pytest.raises(ConfigError, match="'x'"):
            parse_device_mapping(bad, "x")


@pytest.mark.parametrize(
    "block, stage, offload",
    [
        ("deepspeed_zero", 0, None),
        ("deepspeed_zero2", 2, None),
        ("deepspeed_zero2_cpuoffload", 2, "cpu"),
        ("deepspeed_zero3", 3, None),
        ("deepspeed_zero3_cpuoffload", 3, "cpu"),
    ],
)
def test_hydra_defaults_compose_the_shipped_deepspeed_configs(tmp_path, block, stage, offload):
    """A user config in its own folder pulls a shared block in with `../config/<name>@_here_`."""
    data = yaml.safe_load((TINY / "rlvr_tiny.yaml").read_text())
    data["defaults"] = ["../config/envs@_here_", f"../config/{block}@_here_", "_self_"]
    data["actor_train"]["strategy_args"]["strategy_config"] = "${" + block + "}"
    config = load_rlvr_config(compose_config(user_config(tmp_path, data), "user", ["rollout_batch_size=16"]))
    ds = config.actor_train.strategy_args.strategy_config
    assert ds["zero_optimization"]["stage"] == stage
    assert ds["zero_optimization"].get("offload_optimizer", {}).get("device") == offload
    assert config.system_envs["OMP_NUM_THREADS"] == "1"  # from envs.yaml
    assert config.rollout_batch_size == 16  # interpolations and overrides compose together

    from roll.strategies.deepspeed_train import resolve_ds_config

    resolved = resolve_ds_config(ds, config.actor_train.training_args, world_size=2, dtype="float32")
    assert resolved["train_batch_size"] == 64 * 1 * 2 and resolved["bf16"]["enabled"] is False


def test_unreferenced_unknown_top_level_block_is_an_error():
    assert "unknown key 'my_block'" in error_of("+my_block={a: 1}")


def test_qwen_recipe_dry_run_prints_the_16_gpu_plan(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("launcher", EXAMPLES / "start_rlvr_pipeline.py")
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    assert (
        launcher.main(["--config_path", str(EXAMPLES / "qwen2.5-7B-rlvr"), "--config_name", "rlvr_config", "--dry_run"])
        == 0
    )
    out = capsys.readouterr().out
    assert "placement on 16 devices:" in out and "device  15: actor_train[15], actor_infer[15], reference[15]" in out
    assert "nodes     : node 0 = devices 0-7, node 1 = devices 8-15" in out
    assert "actor_train global batch          512" in out
    assert "are not implemented" not in out  # vllm, its rollout engine, is implemented (issue #6)
    assert launcher.main(["--config_name", "rlvr_tiny", "--dry_run", "rollout_batch_size=7"]) == 2
    assert "is not a multiple of the global train batch" in capsys.readouterr().err


def test_configuration_reference_is_current():
    from scripts.config_reference import render

    doc = (EXAMPLES.parent / "docs" / "configuration.md").read_text()
    assert doc == render(), "docs/configuration.md is stale: python scripts/config_reference.py > docs/configuration.md"


def test_validation_samples_per_prompt():
    def validation(*overrides):
        return tiny(*[f"validation.generating_args.{o}" for o in overrides]).validation

    assert tiny().validation.generating_args.num_return_sequences == 1  # greedy, one answer
    sampled = validation("num_return_sequences=4", "do_sample=true")
    assert sampled.generating_args.num_return_sequences == 4 and sampled.pass_score == 1.0
    assert validation("num_return_sequences=null").generating_args.num_return_sequences == 1
    greedy = error_of("validation.generating_args.num_return_sequences=2", "validation.generating_args.do_sample=false")
    assert "set validation.generating_args.do_sample: true" in greedy
    assert "must be ≥ 1" in error_of("validation.generating_args.num_return_sequences=0")
