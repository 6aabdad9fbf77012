"""ROLL's current example YAMLs: the keys and values they use load with ROLL's meaning (files written here in
ROLL's shape; CI has no ROLL checkout), and the generated table of ROLL's own examples is well-formed."""

import json
import logging
import re

import pytest
import torch

from roll.configs import ConfigError, compose_config
from roll.pipeline.agentic.config import load_agentic_config
from roll.pipeline.rlvr.config import RLVRConfig, load_rlvr_config
from scripts.roll_examples import RESULTS, examples_section, scope
from tests.configs.test_roll_compat import CORPUS, ROOT, rlvr_dict

TINY = ROOT / "examples" / "tiny_rlvr"

NOTES: list[str] = []  # what roll.config logged while `current` loaded


@pytest.fixture(scope="module")
def current():
    handler = logging.Handler()
    handler.emit = lambda record: NOTES.append(record.getMessage())
    logging.getLogger("roll.config").addHandler(handler)
    try:
        return load_rlvr_config(compose_config(str(CORPUS), "rlvr_roll_current_examples"))
    finally:
        logging.getLogger("roll.config").removeHandler(handler)


def test_current_roll_keys_load_with_rolls_meaning(current):
    train, infer = current.actor_train, current.actor_infer
    assert current.value_clip is None
    assert infer.generating_args.top_k == 0 and current.validation.generating_args.top_k == 0  # -1 = off
    assert train.data_args.domain_interleave_probs == {"math": 0.6, "ifeval": 0.3}
    assert train.rpc_timeout == infer.rpc_timeout == 72000 and current.rewards["math"].rpc_timeout == 72000
    assert current.rewards["ifeval"].rpc_timeout == 60  # a role's own value is kept
    assert train.system_envs == {"NCCL_DEBUG": "WARN"}
    # load_balance packing = dynamic batching with ROLL's per-pack token budgets
    assert train.use_sequence_packing and train.use_dynamic_batching_in_train and train.use_dynamic_batching_in_infer
    assert (train.max_tokens_per_microbatch_in_train, train.max_tokens_per_microbatch_in_infer) == (2048, 4096)
    assert train.training_args.warmup_ratio == 0.1
    assert infer.strategy_args.strategy_config["disable_log_stats"] is False
    notes = "\n".join(NOTES)
    for key in ("actor_train.model_args.flash_attn", "validation.eval_steps", "actor_train.use_remove_padding"):
        assert f"'{key}'" in notes and "ROLL ignores it too" in notes


def test_value_clip_null_is_the_unclipped_loss():
    from roll.algorithms.value_losses import compute_value_loss

    vpreds, returns, values = torch.tensor([[3.0, 0.0]]), torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0, 0.0]])
    mask = torch.ones(1, 2)
    loss, clipfrac = compute_value_loss(vpreds, returns, values, mask, None)
    assert loss.item() == pytest.approx(0.5 * (4.0 + 1.0) / 2) and clipfrac.item() == 0  # ROLL: 0.5·mean((v−R)²)
    clipped, _ = compute_value_loss(vpreds, returns, values, mask, 0.5)
    assert clipped.item() == pytest.approx(0.5 * (4.0 + 1.0) / 2)  # max(unclipped, clipped) = the same here
    with pytest.raises(ConfigError, match="'value_clip' = 'off'"):
        load_rlvr_config(rlvr_dict(value_clip="off"))


def test_top_k_minus_one_is_off_and_other_negatives_are_refused():
    data = rlvr_dict()
    data["actor_infer"]["generating_args"] = {"top_k": -1}
    assert load_rlvr_config(data).actor_infer.generating_args.top_k == 0
    data["actor_infer"]["generating_args"] = {"top_k": -2}
    with pytest.raises(ConfigError, match=r"'actor_infer.generating_args.top_k' = -2: must be ≥ 0 or -1"):
        load_rlvr_config(data)


def test_domain_quotas_below_one_give_the_rest_to_the_last_domain():
    from roll.data.prompts import MixedPromptSampler

    pools = {name: [{"domain": name, "i": i} for i in range(20)] for name in ("math", "code", "ifeval")}
    sampler = MixedPromptSampler(pools, {"math": 0.4, "code": 0.3, "ifeval": 0.1}, seed=0, mode="quota")
    rows = sampler.next_rows(10)  # ROLL: int(0.4·10), int(0.3·10), then 10 − 7 for the last domain
    assert [sum(r["domain"] == d for r in rows) for d in ("math", "code", "ifeval")] == [4, 3, 3]
    data = rlvr_dict()
    data["actor_train"]["data_args"]["domain_interleave_probs"] = {"math": 0.8, "code": 0.3}
    with pytest.raises(ConfigError, match=r"sum in \(0, 1\]"):
        load_rlvr_config(data)


def test_vllm_takes_every_engine_argument_and_only_those():
    from roll.strategies.vllm_args import engine_arg_names
    from roll.strategies.vllm_infer import validate_strategy_config

    names = engine_arg_names()
    assert {"disable_log_stats", "max_num_seqs", "swap_space" if "swap_space" in names else "seed"} <= names
    engine, settings = validate_strategy_config({"disable_log_stats": True, "sleep_level": 2}, on_cpu=True)
    assert engine == {"disable_log_stats": True} and settings["sleep_level"] == 2
    with pytest.raises(ValueError, match=r"\['gpu_memory_utilisation'\]: not fields of vLLM's EngineArgs"):
        validate_strategy_config({"gpu_memory_utilisation": 0.5}, on_cpu=True)
    with pytest.raises(ValueError, match=r"\['model'\] are set by roll"):
        validate_strategy_config({"model": "/other"}, on_cpu=True)
    with pytest.raises(ValueError, match="sleep_level = 3: 1 or 2"):
        validate_strategy_config({"sleep_level": 3}, on_cpu=True)


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("rpc_timeout", 0, "'rpc_timeout' = 0: expected a positive number of seconds"),
    ],
)
def test_run_level_keys_refuse_what_roll_cannot_do(key, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_rlvr_config(rlvr_dict(**{key: value}))


@pytest.mark.parametrize(
    "packing,message",
    [
        ({"algorithm": "greedy"}, "'actor_train.sequence_packing_args.algorithm' = 'greedy'"),
        ({"max_packed_sequence_length_train": 0}, "max_packed_sequence_length_train' = 0: expected a positive"),
        ({"algorithm": "load_balance", "max_packed_sequence_length_train": 64}, "conflicts with"),
    ],
)
def test_sequence_packing_args_are_checked(packing, message):
    data = rlvr_dict()
    data["actor_train"].update(
        use_sequence_packing=True, sequence_packing_args=packing, max_tokens_per_microbatch_in_train=32
    )
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_rlvr_config(data)


def test_load_balance_train_budget_is_read_only_by_training_roles():
    """ROLL's reference never trains, so its max_packed_sequence_length_train is unread (ROLL's megatron
    sequence-packing example sets it there): only the forward budget becomes the reference's."""
    from roll.configs.roll_compat.example_keys import sequence_packing_args

    translate = sequence_packing_args(RLVRConfig.role_specs())

    packing = {
        "algorithm": "load_balance",
        "max_packed_sequence_length_train": 64,
        "max_packed_sequence_length_forward": 48,
    }
    reference, actor = {"use_sequence_packing": True}, {"use_sequence_packing": True}
    assert translate(reference, dict(packing), "reference.sequence_packing_args") is None
    assert reference == {
        "use_sequence_packing": True,
        "max_tokens_per_microbatch_in_infer": 48,
        "use_dynamic_batching_in_infer": True,
    }
    assert translate(actor, dict(packing), "actor_train.sequence_packing_args") is None
    assert actor["max_tokens_per_microbatch_in_train"] == 64 and actor["use_dynamic_batching_in_train"]


def test_skip_mock_system_prompt_takes_rolls_rendering_only():
    assert load_rlvr_config(rlvr_dict(skip_mock_system_prompt=True))
    with pytest.raises(ConfigError, match="'skip_mock_system_prompt' = False is refused: roll renders"):
        load_rlvr_config(rlvr_dict(skip_mock_system_prompt=False))


def test_include_stop_str_in_output_false_is_refused():
    data = rlvr_dict()
    data["actor_infer"]["generating_args"] = {"include_stop_str_in_output": False}
    with pytest.raises(ConfigError, match="keeps a matched stop string"):
        load_rlvr_config(data)


def test_warmup_ratio_is_rolls_ceil_of_the_run():
    from roll.configs.worker import TrainingArgs
    from roll.strategies.train_common import warmup_steps

    assert warmup_steps(TrainingArgs(warmup_ratio=0.1), 25) == 3  # ceil(2.5), ROLL's rule
    assert warmup_steps(TrainingArgs(warmup_steps=7, warmup_ratio=0.1), 25) == 7  # warmup_steps wins
    with pytest.raises(ConfigError, match=r"'actor_train.training_args.warmup_ratio' = 1.5: must be in \[0, 1\]"):
        load_rlvr_config(compose_config(str(TINY), "rlvr_tiny", ["actor_train.training_args.warmup_ratio=1.5"]))


def test_role_system_envs_reach_the_workers_runtime_env(current):
    from roll.pipeline.base import _runtime_env

    env = _runtime_env(current, "actor_train", current.actor_train)
    assert env["env_vars"]["NCCL_DEBUG"] == "WARN"
    assert _runtime_env(current, "actor_infer", current.actor_infer) is None  # no role envs: Ray's job env only


def test_agentic_keys_of_current_roll_examples():
    overrides = [
        "+custom_envs.FrozenLake.max_env_step_concurrent=0",
        "+train_env_manager.system_envs={OMP_NUM_THREADS:'1'}",
        "+actor_train.offload_nccl=true",
        "custom_envs.FrozenLake.agent_template='{observation} {suffix}'",
    ]
    config = load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", overrides))
    assert config.train_env_manager.system_envs == {"OMP_NUM_THREADS": "1"}
    with pytest.raises(ConfigError, match="max_env_step_concurrent' = -1: expected an integer ≥ 0"):
        load_agentic_config(
            compose_config(
                str(CORPUS), "agentic_roll_frozen_lake", ["+custom_envs.FrozenLake.max_env_step_concurrent=-1"]
            )
        )


def test_fsdp2_and_megatron_take_rolls_engine_keys():
    from roll.strategies.fsdp2_train import resolve_fsdp2_config
    from roll.strategies.megatron_train import resolve_megatron_config

    config = resolve_fsdp2_config({"wrap_policy": {"transformer_layer_cls_to_wrap": ["Qwen2DecoderLayer"]}}, "float32")
    assert config["wrap_modules"] == ["Qwen2DecoderLayer"]
    extra = resolve_fsdp2_config({"wrap_policy": {"wrap_embeddings": True, "moe_experts": "Qwen3MoeMLP"}}, "float32")
    assert extra["wrap_embeddings"] is True and extra["moe_experts"] == ["Qwen3MoeMLP"]
    with pytest.raises(ValueError, match="wrap_policy=.*valid keys are"):
        resolve_fsdp2_config({"wrap_policy": {"wrap_decoder": True}}, "float32")
    assert "max_grad_norm" not in resolve_megatron_config({"max_grad_norm": 1.0}, world_size=1)


def test_critic_trl_value_head_is_the_critic_value_model():
    data = rlvr_dict(adv_estimator="gae")
    data["critic"] = {
        "model_args": {"model_name_or_path": "/m", "model_type": "trl"},
        "strategy_args": {"strategy_name": "deepspeed_train"},
        "device_mapping": [0],
    }
    assert load_rlvr_config(data).critic.model_args.model_type == "auto_token_classification"


def test_roll_examples_table_is_well_formed():
    """docs/roll_examples.json (scripts/check_roll_examples.py --write-doc) and its table in the compat page."""
    results = json.loads(RESULTS.read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", results["roll_commit"])
    rows = results["examples"]
    statuses = {"pass", "refused", "broken in ROLL", "out of scope"}
    for row in rows:
        assert row["status"] in statuses, row
        assert (row["status"] == "pass") == (row["reason"] == ""), row  # every non-pass says why
        assert (row["status"] == "out of scope") == (scope(row["path"]) is not None), row  # the rule as coded
    passes = sum(row["status"] == "pass" for row in rows)
    in_scope = sum(row["status"] != "out of scope" for row in rows)
    # the recorded floor (49 of 75: Ulysses, HSDP, megatron sequence_parallel, fsdp2 tiled MLP and wrap_policy
    # units); never silently lower
    assert passes >= 49 and in_scope >= 70
    broken = {row["path"] for row in rows if row["status"] == "broken in ROLL"}
    assert {
        "examples/qwen2.5-0.5B-agentic/agentic_val_webshop.yaml",
        "examples/agentic_demo/atropos_gsm8k_grpo_qwen25_0.5b.yaml",
        "examples/agentic_demo/openreward_endless_terminals_reinforce_qwen35_2b.yaml",
    } <= broken
    page = (ROOT / "docs" / "roll_compatibility.md").read_text()
    section = "\n".join(examples_section(results))
    assert section in page
    table = [line for line in section.splitlines() if line.startswith("| `examples/")]
    assert len(table) == len(rows) and all(line.count(" | ") >= 2 for line in table)


def test_scope_rule():
    assert scope("examples/qwen2.5-7B-rlvr_megatron/rlvr_config.yaml") is None
    assert scope("examples/qwen3_agentic_gem/gem_math_dapo.yaml") is None
    from roll.pipeline.kinds import KINDS

    for path, word, kind in (
        ("examples/qwen2.5-7B-sft_megatron/sft_config.yaml", "SFT", "sft"),
        ("examples/dpo_examples/qwen2.5-3B_dpo_megatron.yaml", "DPO", "dpo"),
        ("examples/qwen2.5-vl-7B-rlvr/rlvr_megatron.yaml", "vision", "rlvr_vl"),
        ("examples/qwen3.5-27B-rlvr_megatron/rlvr_megatron_80GB.yaml", "multimodal", "rlvr_vl"),
        ("examples/config/traj_envs.yaml", "block", None),
    ):
        if kind in KINDS:  # the kind is built: its examples are checked
            assert scope(path) is None, path
        else:
            assert word in scope(path), path


def test_step_manager_renders_rolls_step_template():
    from roll.agentic.env_managers.step import StepEnvManager
    from roll.configs.agentic import EnvConfig

    env = EnvConfig(
        env_type="frozen_lake",
        env_manager="step",
        history_length=1,
        agent_template="{env_instruction}|{step_count}|{history_length}|{history}|{current_step}|"
        "{current_observation}|{max_response_length}",
        env_instruction="Reach G.",
        max_tokens_per_step=8,
    )
    manager = StepEnvManager.__new__(StepEnvManager)  # the rendering only: no tokenizer, no worker
    manager.env_config, manager.env = env, None
    manager.episode = type("E", (), {"turns": [None, None]})()  # two turns taken
    manager.history = [("o1", "Left", 0.0), ("o2", "Right", -1.0)]
    manager.observation = "o3"
    text = manager._render()
    assert text == "Reach G.|2|1|(step: 2, observation: o2, action: Right, reward: -1.0)|3|o3|8"
    # the traj manager's {suffix}: the last step's info["suffix"] (ROLL's environment state string)
    manager.env_config = EnvConfig(env_type="frozen_lake", agent_template="{observation}<{suffix}>", max_turns=5)
    manager.suffix = "2 boxes left"
    assert manager.turn_text("board") == "board<2 boxes left>"


def test_batch_adjust_modes_follow_rolls_rules():
    import numpy as np

    from roll.pipeline.agentic.batch_adjust import rows_to_keep

    def keep(count, multiple, mode, seed=0):
        return rows_to_keep(count, multiple, mode, np.random.default_rng(seed))

    assert len(keep(10, 4, "delete")) == 8  # 10 % 4 = 2 random rows dropped
    assert len(keep(10, 4, "random_sample")) == 4  # one global batch of random rows
    assert len(keep(10, 4, "auto")) == 8  # dropping 2 of 10 is under half: delete
    assert keep(10, 4, "copy") is None  # padding fills up to 12
    assert all(keep(3, 4, mode) is None for mode in ("copy", "delete", "auto", "random_sample"))  # < one batch
    assert keep(12, 4, "delete") is None  # already a multiple
    rows = keep(10, 4, "delete", seed=7)
    assert list(rows) == sorted(set(rows)) and rows.max() < 10 and list(rows) == list(keep(10, 4, "delete", seed=7))
    config = load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", ["batch_adjust_mode=delete"]))
    assert config.batch_adjust_mode == "delete"


def test_judge_server_becomes_the_domains_own_engine():
    judge = "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker"
    data = rlvr_dict(
        reward_model={
            "name": "reward_llm",
            "worker_cls": "roll.pipeline.base_worker.InferWorker",
            "model_args": {"model_name_or_path": "/judge", "dtype": "bf16"},
            "generating_args": {"max_new_tokens": 16, "temperature": 0.3},
            "strategy_args": {"strategy_name": "vllm", "strategy_config": {"gpu_memory_utilization": 0.8}},
            "device_mapping": "[1, 2]",
        }
    )
    data["rewards"]["judge"] = {"worker_cls": judge, "judge_model_type": "cluster", "world_size": 32}
    reward = load_rlvr_config(data).rewards["judge"]
    assert reward.judge_model_type == "inference" and reward.model_args.model_name_or_path == "/judge"
    assert reward.model_args.dtype == "bfloat16" and reward.generating_args.temperature == 0.3
    assert reward.device_mapping == [1, 2] and reward.world_size == 2  # the engines, not ROLL's 32 clients
    data = rlvr_dict(reward_model={"model_args": {"model_name_or_path": "/judge"}})
    with pytest.raises(ConfigError, match="needs exactly one rewards.<domain> with judge_model_type: cluster"):
        load_rlvr_config(data)


def test_val_batch_size_plays_rounds_on_new_seeds():
    """ROLL's val_batch_size = validation trajectories: each environment plays val_batch_size / envs episodes."""
    from types import SimpleNamespace

    from roll.pipeline.agentic.pipeline import AgenticPipeline

    config = load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", ["val_batch_size=128"]))
    envs = config.val_env_manager.num_envs
    assert config.val_rounds == 128 // envs == 2
    calls = []

    class RecordingRollout:  # test double of EnvRollout: records the assignments, plays nothing
        def run(self, assignments, generation, seed):
            calls.append(assignments)
            episode = {"tag": "FrozenLake", "success": 1.0, "score": 1.0, "num_turns": 1, "invalid_actions": 0}
            return [], [{**episode, "truncated": 0} for _ in assignments], []

    pipeline = SimpleNamespace(
        config=config,
        memory=SimpleNamespace(use=lambda *roles: None),
        rollouts={"val_env": RecordingRollout()},
        _generation=lambda manager, validation: {},
    )
    AgenticPipeline._val_episodes(pipeline, config.val_env_manager)  # validate's episodes (rollout_mock aside)
    assert len(calls) == 2 and all(len(call) == envs for call in calls)
    seeds = [seed for call in calls for seed, _, _ in call.values()]
    groups = config.val_env_manager.num_env_groups
    assert sorted(set(seeds)) == [config.val_seed_offset + g for g in range(2 * groups)]  # round 2: new groups
    assert calls[0][0] == (config.val_seed_offset, "val-0", "val-0")  # round 1 = the single-round episodes


def test_max_traj_per_env_defaults_to_rolls_no_cap():
    two_rounds = ["rollout_batch_size=256"]  # 128 training environments, 2 episodes each
    assert (
        load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", two_rounds)).episodes_per_env == 2
    )
    capped = [*two_rounds, "+train_env_manager.max_traj_per_env=1"]
    with pytest.raises(ConfigError, match="exceeds 'train_env_manager.max_traj_per_env' = 1"):
        load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", capped))


@pytest.mark.parametrize(
    "env_type,reason",
    [
        ("alfworld", "'alfworld': not an environment roll ships"),
        ("webshop", "'webshop' is refused: ROLL's WebShopEnv needs the WebShop simulator"),
        (
            "sokoban_sandbox",
            "'sokoban_sandbox' is refused: ROLL's SokobanSandboxEnv plays Sokoban through Alibaba's ROCK",
        ),
        # GEM ids roll does not build (game:GuessTheNumber-v0 and rg:letter_counting it does: test_gem_envs.py)
        ("game:Wordle-v0", "'game:Wordle-v0' is refused: an environment of the GEM package"),
        ("rg:basic_arithmetic", "'rg:basic_arithmetic' is refused: an environment of the GEM package (gem-llm on PyPI"),
    ],
)
def test_an_environment_roll_does_not_ship_fails_the_dry_run_with_its_reason(env_type, reason):
    unknown = [f"custom_envs.FrozenLake.env_type='{env_type}'", "custom_envs.FrozenLake.max_tokens_per_step=999"]
    with pytest.raises(ConfigError, match=re.escape(f"custom_envs.FrozenLake.env_type' = {reason}")):  # env first
        load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", unknown))


def test_rolls_env_manager_classes_map_or_are_refused_with_their_reason():
    cls = "custom_envs.FrozenLake.env_manager_cls=roll.pipeline.agentic.env_manager."
    concat = [
        cls + "step_concat_env_manager.StepConcatEnvManager",
        "custom_envs.FrozenLake.agent_template='{history}|{current_observation}'",
        "adv_estimator=step_reinforce",
    ]
    config = load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", concat))
    assert config.custom_envs["FrozenLake"].env_manager == "step_concat"  # a step-row manager: step_reinforce runs
    with pytest.raises(ConfigError, match=r"step_concat manager\): placeholders may be \['\{history\}', '\{current"):
        bad = [*concat[:1], "custom_envs.FrozenLake.agent_template='{env_instruction} {current_observation}'"]
        load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", bad))
    for name, reason in (
        ("proxy_env_manager.ProxyEnvManager", "OpenAI-style chat endpoint over HTTP"),
        ("agent_native_env_manager.AgentNativeStepEnvManager", "tool-calling agent environments"),
    ):
        with pytest.raises(ConfigError, match=f"{name}' is refused: ROLL's .*{reason}"):
            load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", [cls + name]))
