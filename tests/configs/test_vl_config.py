"""Vision-language models in a config (roll.configs.checks.vision_language_problems): the engines that cannot run
one (Megatron, SGLang), a VL critic and Ulysses with a VL model are refused at load time (and --dry_run) with the
reason; the HF-module engines and vLLM take it."""

import pytest

from roll.configs import ConfigError
from roll.pipeline.rlvr.config import load_rlvr_config
from tests.configs.test_roll_compat import rlvr_dict
from tests.models.vl_fixtures import tiny_vl


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    return str(tiny_vl(tmp_path_factory.mktemp("vl")))


def vl_config(path, train="deepspeed_train", infer="hf_infer", **train_extra) -> dict:
    data = rlvr_dict()
    for role, strategy in (("actor_train", train), ("actor_infer", infer)):
        data[role]["model_args"]["model_name_or_path"] = path
        data[role]["strategy_args"] = {"strategy_name": strategy}
    data["actor_train"]["model_args"].update(train_extra)
    return data


@pytest.mark.parametrize("train,infer", [("deepspeed_train", "hf_infer"), ("fsdp2_train", "vllm")])
def test_engines_that_run_vl_models_are_accepted(vl_dir, train, infer):
    config = load_rlvr_config(vl_config(vl_dir, train, infer))
    assert config.actor_train.strategy_args.strategy_name == train


def test_megatron_with_a_vl_model_is_refused_with_its_reason(vl_dir):
    with pytest.raises(ConfigError, match="actor_train: megatron_train cannot run qwen2_vl: roll's Megatron conversion "
                       "builds causal-LM families only"):  # fmt: skip
        load_rlvr_config(vl_config(vl_dir, train="megatron_train"))


def test_ulysses_and_a_vl_critic_are_refused(vl_dir):
    data = rlvr_dict(num_gpus_per_node=2)
    two_ranks = vl_config(vl_dir, train="fsdp2_train", ulysses_size=2)
    data.update({key: value for key, value in two_ranks.items() if key.startswith("actor")})
    data["actor_train"]["device_mapping"] = [0, 1]
    with pytest.raises(ConfigError, match="ulysses_size > 1 with a vision-language model is not built"):
        load_rlvr_config(data)
    data = vl_config(vl_dir)
    data["adv_estimator"] = "gae"
    data["critic"] = {
        "model_args": {"model_name_or_path": vl_dir},
        "strategy_args": {"strategy_name": "deepspeed_train"},
        "device_mapping": [0],
    }
    with pytest.raises(ConfigError, match="critic: a value model of the vision-language qwen2_vl is not built"):
        load_rlvr_config(data)
