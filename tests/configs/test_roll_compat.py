"""ROLL's vocabulary loads here: the migration corpus in tests/configs/roll_corpus, aliases and
refused keys, every problem of a file at once, and docs/roll_compatibility.md kept current."""

import copy
import re
import shutil
from pathlib import Path

import pytest

from roll.cli import launch
from roll.configs import ConfigError, compose_config
from roll.configs.roll_compat.keys import ROLL_KEYS
from roll.pipeline.agentic.config import load_agentic_config
from roll.pipeline.rlvr.config import load_rlvr_config
from scripts.roll_compat_page import compatibility_page

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "roll_corpus"


def dry_run(config_dir: Path, name: str, capsys, script="rlvr") -> tuple[int, str, str]:
    load = load_rlvr_config if script == "rlvr" else load_agentic_config
    code = launch(
        ["--config_path", str(config_dir), "--config_name", name, "--dry_run"],
        "",
        ROOT / "examples",
        "",
        "",
        load,
        lambda config: pytest.fail("--dry_run must not run the pipeline"),
    )
    out = capsys.readouterr()
    return code, out.out, out.err


def test_guide_rlvr_fragment_passes_dry_run_unedited(capsys):
    code, out, err = dry_run(CORPUS, "rlvr_guide", capsys)
    assert code == 0, err
    assert "dtype: bfloat16" in out and "prompt_key: instruction" in out and "apply_chat_template: true" in out
    assert "checkpoint_dir: ./output/guide_rlvr" in out  # checkpoint_config.output_dir
    assert (
        "rewards.math: roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker -> "
        "roll.workers.rewards.math_rule.MathRuleRewardWorker" in out
    )


def test_five_mistakes_are_reported_in_one_run(capsys):
    code, _, err = dry_run(CORPUS, "rlvr_five_mistakes", capsys)
    assert code == 2
    assert "5 problems in the config" in err
    for fragment in (
        "'max_stepz'; did you mean 'max_steps'",
        "dtype' = 'bf17'",
        "learning_rate' = 'fast'",
        "unknown key 'actor_train.data_args.promt'",
        "num_beams' = 4 is refused: 1 only",
    ):
        assert fragment in err, err
    assert "[actor_train.model_args]" in err and "[top level]" in err  # grouped by block


def test_five_domains_with_mixing_and_roll_top_level_keys(capsys):
    code, out, err = dry_run(CORPUS, "rlvr_five_domains", capsys)
    assert code == 0, err
    assert "domain_interleave_probs:" in out and "num_train_epochs: 2" in out and "max_steps: null" in out
    assert "max_num_seqs: 256" in out  # max_running_requests -> the vllm engine's limit
    assert "stop_strings:" in out and "preprocessing_num_workers: 2" in out
    for domain in ("math_rule", "code_sandbox", "llm_judge", "ifeval_rule", "crossthinkqa_rule"):
        assert f"roll.workers.rewards.{domain}." in out


def test_roll_megatron_recipe_passes_dry_run_unedited(capsys):
    code, out, err = dry_run(CORPUS, "rlvr_roll_megatron", capsys)
    assert code == 0, err
    for fragment in (
        "checkpoint_dir: /ckpt/roll_megatron",  # checkpoint_config.output_dir, apart from output_dir
        "num_nodes: 2",  # derived from device id 15 with 8 per node
        "log_dir: /tensorboard/roll_megatron",
        "model_name_or_path: /models/policy",  # pretrain fills the unset model paths
        "model_name_or_path: /models/judge",
        "interleave_probs: null",  # ROLL's "1.0": the files as one pool
        "reward_type: soft",
        "judge_prompt: Qwen2.5-7B-Instruct-RLVR-prompt",
        "model_type: trl",
    ):
        assert fragment in out, fragment
    assert out.count("apply_chat_template: true") >= 1 and out.count("max_grad_norm: 1.0") >= 1


def test_roll_agentic_recipe_passes_dry_run_unedited(capsys):
    code, out, err = dry_run(CORPUS, "agentic_roll_frozen_lake", capsys, script="agentic")
    assert code == 0, err
    for fragment in (
        "max_turns: 5",  # custom_envs.<tag>.max_steps
        "env_manager: traj",  # ROLL's TrajEnvManager
        "action_pattern: <think>(.*?)</think>",  # lifted from env_config
        "format_penalty: -0.01",
        "env_instruction: Walk to the goal",
        "agent_system_template: You play games well",
        "norm_std_type: group",  # reward_normalization.method: mean_std with grouping traj_group_id
        "val_batch_size: 64",
        "checkpoint_dir: /ckpt/agentic",
        "grid_lookup:",
    ):
        assert fragment in out, fragment


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["+actor_train.sequence_packing_args={algorithm:greedy}"], "sequence_packing_args.algorithm' = 'greedy'"),
        (["batch_adjust_mode=shuffle"], "'batch_adjust_mode' = 'shuffle' is not allowed"),
        (["+actor_train.model_args.ulysses_size=2"], "ulysses_size' = 2: strategy 'megatron_train' has no Ulysses"),
        (["val_batch_size=96"], "'val_batch_size' = 96, but validation plays whole rounds of one episode per"),
        (
            ["reward_normalization.method=mean", "+reward_normalization.norm_std_type=group"],
            "means norm_std_type: None",
        ),
        (
            ["custom_envs.FrozenLake.env_manager_cls=roll.pipeline.agentic.env_manager.x.VLTrajEnvManager"],
            "env_manager_cls' = 'roll.pipeline.agentic.env_manager.x.VLTrajEnvManager' is refused",
        ),
        (["custom_envs.FrozenLake.agent_template='{history} {observation}'"], "placeholders may be"),
        (
            ["+actor_train.strategy_args.strategy_config.persist_layer_norm=true"],
            "persist_layer_norm=True is refused: Qwen2/Llama use RMSNorm",
        ),
        (
            ["+actor_train.strategy_args.strategy_config.cross_entropy_loss_fusion=true"],
            "cross_entropy_loss_fusion (ROLL's) is refused",
        ),
    ],
)
def test_roll_keys_roll_cannot_honour_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", overrides))


def test_roll_fusion_flags_load():
    """ROLL's megatron examples set apply_rope_fusion (TransformerEngine's kernel: checked where the model is
    built) and bias_activation_fusion (plain torch): both load and reach the strategy_config (refused before)."""
    flags = ("apply_rope_fusion", "bias_activation_fusion")
    overrides = [f"+actor_train.strategy_args.strategy_config.{flag}=true" for flag in flags]
    config = load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", overrides))
    assert all(config.actor_train.strategy_args.strategy_config[flag] is True for flag in flags)


def rlvr_dict(**extra) -> dict:
    base = {
        "rollout_batch_size": 4,
        "num_return_sequences_in_group": 2,
        "actor_train": {
            "model_args": {"model_name_or_path": "/m"},
            "data_args": {"file_name": "t.json"},
            "strategy_args": {"strategy_name": "deepspeed_train"},
            "device_mapping": [0],
        },
        "actor_infer": {
            "model_args": {"model_name_or_path": "/m"},
            "strategy_args": {"strategy_name": "hf_infer"},
            "device_mapping": [0],
        },
        "rewards": {"math": {"worker_cls": "roll.workers.rewards.math_rule.MathRuleRewardWorker"}},
    }
    for key, value in extra.items():
        base[key] = value
    return base


@pytest.mark.parametrize(
    "roll_name,ours", [("fp32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16"), ("bfloat16", "bfloat16")]
)
def test_dtype_both_spellings(roll_name, ours):
    data = rlvr_dict()
    data["actor_train"]["model_args"]["dtype"] = roll_name
    assert load_rlvr_config(data).actor_train.model_args.dtype == ours


def test_column_alias_conflict_and_prompt_rewriting_template_are_errors():
    data = rlvr_dict()
    data["actor_train"]["data_args"].update(prompt="a", prompt_key="b", template="longCOT_qwen2.5")
    with pytest.raises(ConfigError) as error:
        load_rlvr_config(data)
    assert "conflicts with 'prompt_key'" in str(error.value)
    assert "template' = 'longCOT_qwen2.5' is not offered" in str(error.value)


@pytest.mark.parametrize(
    "template,chat_template", [("native", None), ("qwen2_5", None), ("qwen3", "qwen3"), ("qwen3_coder", None)]
)
def test_named_templates(template, chat_template):
    data = rlvr_dict()
    data["actor_train"]["data_args"]["template"] = template
    args = load_rlvr_config(data).actor_train.data_args
    assert args.apply_chat_template and args.chat_template == chat_template


def test_length_aliases_are_checked():
    with pytest.raises(ConfigError, match="val_prompt_length' = 99"):
        load_rlvr_config(rlvr_dict(val_prompt_length=99))
    with pytest.raises(ConfigError, match="'sequence_length' = 3 < prompt_length"):
        load_rlvr_config(rlvr_dict(sequence_length=3))


def test_strategy_config_is_validated_by_the_engine_at_load():
    data = rlvr_dict()
    data["actor_infer"]["strategy_args"] = {"strategy_name": "vllm", "strategy_config": {"gpu_memory_utilisation": 0.5}}
    with pytest.raises(ConfigError, match="actor_infer: vllm: unknown strategy_config keys"):
        load_rlvr_config(data)


def test_deepspeed_zero3_lora_with_defaults(tmp_path, capsys):
    shutil.copytree(ROOT / "examples" / "config", tmp_path / "config")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "ds_lora.yaml").write_text(
        "defaults:\n  - ../config/envs@_here_\n  - ../config/deepspeed_zero@_here_\n"
        "  - ../config/deepspeed_zero2@_here_\n  - ../config/deepspeed_zero3@_here_\n"
        "  - ../config/deepspeed_zero3_cpuoffload@_here_\n  - _self_\n"
        "pretrain: /models/base\nrollout_batch_size: 8\nnum_return_sequences_in_group: 4\n"
        "actor_train:\n  model_args: {model_name_or_path: '${pretrain}', dtype: bf16, lora_target: all-linear,"
        " lora_rank: 8, lora_alpha: 16}\n"
        "  training_args: {per_device_train_batch_size: 4, gradient_accumulation_steps: 8}\n"
        "  data_args: {template: native, prompt: instruction, file_name: train.json}\n"
        "  strategy_args: {strategy_name: deepspeed_train, strategy_config: '${deepspeed_zero3}'}\n"
        "  device_mapping: list(range(0,1))\n"
        "actor_infer:\n  model_args: {model_name_or_path: '${pretrain}', dtype: bf16}\n"
        "  generating_args: {num_beams: 1}\n  strategy_args: {strategy_name: hf_infer}\n"
        "  device_mapping: list(range(0,1))\n"
        "rewards:\n  math: {worker_cls: roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker}\n"
    )
    code, out, err = dry_run(tmp_path / "recipes", "ds_lora", capsys)
    assert code == 0, err
    assert "lora_target: all-linear" in out


def test_lora_on_fsdp2():
    data = rlvr_dict(pretrain="/m")
    data["actor_train"]["model_args"].update(dtype="bf16", lora_target="q_proj,v_proj", lora_rank=4)
    data["actor_train"]["strategy_args"] = {"strategy_name": "fsdp2_train", "strategy_config": {}}
    assert load_rlvr_config(data).actor_train.model_args.lora


def test_rollout_lora_target_of_another_form_is_dropped_like_roll():
    """ROLL reads actor_infer's lora_target only as "serve a LoRA" (its megatron LoRA examples put the module
    list there, all-linear on actor_train): dropped; a different lora_rank there is still refused."""
    data = rlvr_dict(pretrain="/m")
    data["actor_train"]["model_args"].update(lora_target="all-linear", lora_rank=4)
    data["actor_train"]["strategy_args"] = {"strategy_name": "fsdp2_train", "strategy_config": {}}
    data["actor_infer"]["model_args"].update(lora_target="q_proj,k_proj,v_proj,o_proj", lora_rank=4)
    config = load_rlvr_config(copy.deepcopy(data))
    assert config.actor_train.model_args.lora and not config.actor_infer.model_args.lora
    data["actor_infer"]["model_args"]["lora_rank"] = 16
    with pytest.raises(ConfigError, match="actor_infer.model_args.lora_rank"):
        load_rlvr_config(data)


@pytest.mark.parametrize("name", ["frozen_lake_traj", "sokoban_traj"])
def test_agentic_yaml_with_roll_spellings(name):
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(compose_config(str(ROOT / "examples" / "agentic_demo"), name), resolve=False)
    config.update(
        hydra={"run": {"dir": "."}},
        pretrain="/m",
        sequence_length=100000,
        checkpoint_config={"type": "file_system", "output_dir": config["output_dir"]},
    )
    for role in ("actor_train", "actor_infer"):
        config[role]["model_args"]["dtype"] = "fp32"
    agentic = load_agentic_config(config)
    assert agentic.actor_train.model_args.dtype == "float32"


def test_refused_entries_name_their_reason():
    from omegaconf import OmegaConf

    agentic = OmegaConf.to_container(compose_config(str(CORPUS), "agentic_roll_frozen_lake"), resolve=True)
    for entry in ROLL_KEYS:
        assert entry.note, entry
        if entry.status != "refused":
            continue
        data, load = rlvr_dict(), load_rlvr_config
        if entry.block == "custom_envs":
            data, load = copy.deepcopy(agentic), load_agentic_config
            data["custom_envs"]["FrozenLake"][entry.key] = 1
        elif entry.block == "<role>":
            data["actor_train"][entry.key] = 1
        elif entry.block:
            data["actor_train"].setdefault(entry.block, {})[entry.key] = 1
        else:
            data[entry.key] = 1
        with pytest.raises(ConfigError, match=re.escape("is refused: " + entry.note)):
            load(data)


@pytest.mark.parametrize(
    "key,value,wrong",
    [
        ("reward_norm", "batch", None),  # not a field of ROLL's configs: dropped by ROLL's loader
        ("reward_shift", True, None),
        ("reward_scale", True, None),
        ("use_reward_norm", True, "yes"),  # declared bools ROLL reads nowhere: their type is still checked
        ("add_len_reward", True, "yes"),
        ("use_topr_loss", True, "yes"),
        ("use_topr_neg_loss_coef", 0.5, "x_2"),
        ("positive_loss_coef", "x_1", None),
        ("model_name", "run-1", None),
    ],
)
def test_keys_roll_ignores_are_accepted_with_a_note(key, value, wrong, config_notes):
    config = load_rlvr_config(rlvr_dict(**{key: value}))
    assert f"'{key}' = {value!r} is ignored" in "\n".join(config_notes)
    assert not hasattr(config, key)
    if wrong is not None:
        with pytest.raises(ConfigError, match=f"'{key}' = {wrong!r}: expected"):
            load_rlvr_config(rlvr_dict(**{key: wrong}))


def test_max_running_requests_sets_the_engine_limit():
    data = rlvr_dict(max_running_requests=8)
    data["actor_infer"]["strategy_args"] = {"strategy_name": "vllm"}
    assert load_rlvr_config(data).actor_infer.strategy_args.strategy_config == {"max_num_seqs": 8}
    data = rlvr_dict(max_running_requests=8)
    data["actor_infer"]["strategy_args"] = {"strategy_name": "sglang", "strategy_config": {"max_running_requests": 4}}
    with pytest.raises(ConfigError, match="conflicts with actor_infer.strategy_args.strategy_config"):
        load_rlvr_config(data)
    with pytest.raises(ConfigError, match="refused for actor_infer strategy 'hf_infer'"):
        load_rlvr_config(rlvr_dict(max_running_requests=8))
    with pytest.raises(ConfigError, match="expected true or false"):
        load_rlvr_config(rlvr_dict(is_num_return_sequences_expand="yes"))


def test_roll_compatibility_page_is_current():
    page = (ROOT / "docs" / "roll_compatibility.md").read_text()
    assert page == compatibility_page(), "regenerate: python scripts/roll_compat_page.py > docs/roll_compatibility.md"


def test_repetition_penalty_reaches_every_engine():
    from roll.strategies.hf_infer import HFInferStrategy
    from roll.strategies.sglang_infer import sampling_params

    settings = {
        "max_new_tokens": 4,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "do_sample": True,
        "num_return_sequences": 1,
        "repetition_penalty": 1.3,
    }
    assert HFInferStrategy._generate_kwargs(settings)["repetition_penalty"] == 1.3
    assert "repetition_penalty" not in HFInferStrategy._generate_kwargs({**settings, "repetition_penalty": 1.0})
    assert sampling_params(settings, [0], None)["repetition_penalty"] == 1.3
    assert sampling_params({**settings, "stop_strings": ["</answer>"]}, [0], None)["stop"] == ["</answer>"]
    assert "stop" not in sampling_params(settings, [0], None)
    data = rlvr_dict()
    data["actor_infer"]["generating_args"] = {"repetition_penalty": 0}
    with pytest.raises(ConfigError, match="'actor_infer.generating_args.repetition_penalty' = 0"):
        load_rlvr_config(data)


def test_attn_implementation_reaches_from_pretrained(tmp_path):
    from transformers import AutoModelForCausalLM, Qwen2Config

    from roll.configs.worker import ModelArgs
    from roll.strategies.base import attention_kwargs

    Qwen2Config(
        vocab_size=32,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    ).save_pretrained(tmp_path)
    AutoModelForCausalLM.from_config(Qwen2Config.from_pretrained(tmp_path)).save_pretrained(tmp_path)
    args = ModelArgs(model_name_or_path=str(tmp_path), attn_implementation="eager")
    model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, **attention_kwargs(args))
    assert model.config._attn_implementation == "eager"
    assert attention_kwargs(ModelArgs(model_name_or_path="m", attn_implementation="fa2")) == {
        "attn_implementation": "flash_attention_2"
    }
    assert attention_kwargs(ModelArgs(model_name_or_path="m")) == {}


def test_stop_strings_need_an_engine_that_applies_them():
    data = rlvr_dict()  # actor_infer: hf_infer
    data["actor_infer"]["generating_args"] = {"stop_strings": ["</answer>"]}
    with pytest.raises(ConfigError, match="actor_infer.generating_args.stop_strings' is set but .* 'hf_infer'"):
        load_rlvr_config(data)
    data["actor_infer"]["strategy_args"] = {"strategy_name": "vllm"}
    assert load_rlvr_config(data).actor_infer.generating_args.stop_strings == ["</answer>"]


def test_num_train_epochs_sets_the_run_length_when_max_steps_is_unset():
    from types import SimpleNamespace

    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    data = rlvr_dict()
    data["actor_train"]["training_args"] = {"num_train_epochs": 2.5}
    config = load_rlvr_config(data)
    assert config.max_steps is None
    pipeline = SimpleNamespace(config=config, train_rows=[{}] * 10)  # 2.5 epochs × 10 prompts / 4 per step
    RLVRPipeline._run_length(pipeline)
    assert config.max_steps == 7
    assert load_rlvr_config(rlvr_dict()).max_steps == 1  # neither set: one step, the documented default
    data["actor_train"]["training_args"] = {"num_train_epochs": 0}
    with pytest.raises(ConfigError, match=r"num_train_epochs' = 0(\.0)?: must be > 0"):
        load_rlvr_config(data)
    data = rlvr_dict()
    data["actor_infer"]["training_args"] = {"num_train_epochs": 1}
    with pytest.raises(ConfigError, match="only actor_train's sets the run length"):
        load_rlvr_config(data)


def test_model_type_is_the_critics_only():
    data = rlvr_dict()
    data["actor_train"]["model_args"]["model_type"] = "auto_token_classification"
    with pytest.raises(ConfigError, match="only the critic builds a token-classification"):
        load_rlvr_config(data)
