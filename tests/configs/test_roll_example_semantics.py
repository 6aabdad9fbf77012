"""ROLL's meaning for the keys of its current example YAMLs that roll used to refuse: the agentic grpo with a
group of one, freeze_module_prefix, model_download_type MODELSCOPE, profiler_memory / profiler_timeline and
vLLM's older cuda_graph_sizes. Numbers are worked by hand from ROLL's formulas (cited per test)."""

import math

import numpy as np
import pytest
import torch

from roll.configs import ConfigError, compose_config
from roll.pipeline.agentic.config import load_agentic_config
from roll.pipeline.rlvr.config import load_rlvr_config
from tests.configs.test_roll_compat import CORPUS, rlvr_dict

GROUP_OF_ONE = [
    "train_env_manager.group_size=1",
    "train_env_manager.num_env_groups=128",
    "train_env_manager.num_groups_partition=[128]",
]


def test_agentic_grpo_with_a_group_of_one_is_rolls_reinforce_on_the_normalised_scores():
    """ROLL (roll/pipeline/agentic/utils.py, agentic_compute_advantage): adv_estimator grpo takes the same branch as
    reinforce, compute_reinforce_return(token_level_rewards, gamma) with A_t = r_t + γ·A_{t+1}, on the scores as
    reward_normalization left them; then masked_whiten (unbiased var, rsqrt(var + 1e-8)) and the advantage clip."""
    from roll.distributed.data_proto import DataProto
    from roll.pipeline.agentic.episode_scores import normalize_scores
    from roll.pipeline.core.step_maths import compute_advantages
    from roll.utils.functional import scores_on_last_token

    config = load_agentic_config(
        compose_config(str(CORPUS), "agentic_roll_frozen_lake", GROUP_OF_ONE + ["reward_normalization.method=identity"])
    )
    assert config.adv_estimator == "reinforce"  # was refused: "grpo compares samples of the same prompt"
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.float32)
    scores = torch.tensor([1.0, 0.0, 0.0])  # FrozenLake: reached the goal or not
    norm = config.reward_normalization
    rewards = normalize_scores(scores, np.array(["FrozenLake"] * 3), norm.norm_mean_type, norm.norm_std_type)
    assert rewards.tolist() == [1.0, 0.0, 0.0]  # method identity: no normalisation
    batch = DataProto.from_dict({"response_mask": mask, "token_level_rewards": scores_on_last_token(rewards, mask)})
    batch.non_tensor_batch["uid"] = np.array(["g0", "g1", "g2"], dtype=object)  # three groups of one

    config.gamma, config.whiten_advantages, config.advantage_clip = 0.5, False, None
    compute_advantages(batch, config)
    # reinforce: row 0 has r = 1 on its last token (t = 1): A = [γ·1, 1, 0]; a group-relative grpo would give 0
    assert batch.batch["advantages"].tolist() == [[0.5, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]

    config.gamma, config.whiten_advantages, config.advantage_clip = 1.0, True, 1.0
    compute_advantages(batch, config)
    # six valid tokens [1, 1, 0, 0, 0, 0]: mean 1/3, unbiased var (2·(2/3)² + 4·(1/3)²)/5 = 4/15
    high, low = (2 / 3) / math.sqrt(4 / 15 + 1e-8), (-1 / 3) / math.sqrt(4 / 15 + 1e-8)  # 1.291, -0.6455
    assert high > 1.0  # so the clip at 1.0 acts on it
    expected = torch.tensor([[1.0, 1.0, 0.0], [low, low, low], [low, 0.0, 0.0]])
    torch.testing.assert_close(batch.batch["advantages"], expected)


def test_agentic_grpo_keeps_its_group_estimator_with_groups():
    config = load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake"))
    assert config.adv_estimator == "grpo" and config.train_env_manager.group_size == 8


def test_freeze_module_prefix_freezes_parameters_by_name():
    """ROLL (roll/models/model_providers.py, freeze_model): requires_grad false where the name starts with a
    prefix of the comma-separated list."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from roll.strategies.train_common import freeze_by_prefix

    config = Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    model = Qwen2ForCausalLM(config)
    log = type("L", (), {"info": lambda *a: None})()
    frozen = freeze_by_prefix(model, ["model.embed_tokens", "model.layers.0."], log)
    names = {name for name, p in model.named_parameters() if not p.requires_grad}
    assert frozen == len(names) and "model.embed_tokens.weight" in names
    assert all(n.startswith(("model.embed_tokens", "model.layers.0.")) for n in names)
    assert any(p.requires_grad for n, p in model.named_parameters() if n.startswith("model.layers.1."))
    with pytest.raises(ValueError, match=r"no parameter name starts with \['vision_model'\]"):
        freeze_by_prefix(model, ["vision_model"], log)


def test_freeze_module_prefix_config():
    data = rlvr_dict()
    data["actor_train"]["model_args"]["freeze_module_prefix"] = "model.embed_tokens, lm_head"
    assert load_rlvr_config(data).actor_train.model_args.frozen_prefixes == ["model.embed_tokens", "lm_head"]
    data["actor_train"]["strategy_args"] = {"strategy_name": "megatron_train"}
    with pytest.raises(ConfigError, match="'actor_train.model_args.freeze_module_prefix' is set but strategy"):
        load_rlvr_config(data)


def test_model_download_type_modelscope_fails_only_when_a_download_is_needed(tmp_path):
    from roll.pipeline.core.preflight import check_download_source

    config = load_rlvr_config(rlvr_dict(model_download_type="MODELSCOPE"))
    assert config.model_download_type == "MODELSCOPE"
    check_download_source("actor_train.model_args.model_name_or_path", str(tmp_path), "MODELSCOPE")  # local: fine
    with pytest.raises(ConfigError, match="not a local directory and model_download_type = MODELSCOPE"):
        check_download_source("actor_train.model_args.model_name_or_path", "Qwen/Qwen3-30B-A3B", "MODELSCOPE")
    check_download_source("actor_train.model_args.model_name_or_path", "Qwen/Qwen3-30B-A3B", "HUGGINGFACE_HUB")
    with pytest.raises(ConfigError, match="model_download_type"):
        load_rlvr_config(rlvr_dict(model_download_type="S3"))


def test_profiler_memory_is_the_profiler_block_on_every_step():
    """ROLL (roll/configs/base_config.py + roll/utils/context_managers.py local_profiler): profiler_memory records
    the CUDA memory history of rank 0's worker calls at every step; profiler_timeline a torch-profiler trace."""
    config = load_rlvr_config(rlvr_dict(max_steps=3, profiler_memory=True, profiler_output_dir="/tmp/prof"))
    assert (config.profiler.tool, config.profiler.steps, config.profiler.ranks) == ("torch_memory", [1, 2, 3], [0])
    assert config.profiler.save_path == "/tmp/prof"
    assert load_rlvr_config(rlvr_dict(max_steps=3, profiler_memory=False)).profiler.tool is None
    with pytest.raises(ConfigError, match=r"'profiler_memory' = true \(profiler.tool torch_memory\) conflicts with"):
        load_rlvr_config(rlvr_dict(max_steps=3, profiler_memory=True, profiler_timeline=True))


def test_vllm_cuda_graph_sizes_is_the_current_capture_list():
    from roll.strategies.vllm_args import engine_arg_names
    from roll.strategies.vllm_infer import validate_strategy_config

    names = engine_arg_names()
    if names is None or "cuda_graph_sizes" in names:
        pytest.skip("the installed vLLM keeps cuda_graph_sizes itself (or vLLM is absent)")
    engine, _ = validate_strategy_config({"cuda_graph_sizes": [1, 2, 4, 8, 16]}, on_cpu=True)
    assert engine == {"cudagraph_capture_sizes": [1, 2, 4, 8, 16]}
    assert validate_strategy_config({"cuda_graph_sizes": [48]}, on_cpu=True)[0] == {"max_cudagraph_capture_size": 48}
    with pytest.raises(ValueError, match="conflicts with cudagraph_capture_sizes"):
        validate_strategy_config({"cuda_graph_sizes": [1, 2], "cudagraph_capture_sizes": [4, 8]}, on_cpu=True)


def test_rollout_mock_stores_and_replays_by_kind_and_step(tmp_path):
    """ROLL (roll/distributed/scheduler/rollout_mock_mixin.py): <dump_dir>/<train|val>/step_<6 digits>.pkl; the
    mock mode loads it without generating and fails on a step that was never dumped."""
    from roll.configs.rollout import RolloutMockConfig
    from roll.pipeline.core.rollout_dump import RolloutStore

    calls = []
    dump = RolloutStore(RolloutMockConfig(enable=True, mode="dump", dump_dir=str(tmp_path)))
    assert dump.around("train", 3, lambda: calls.append(1) or {"step": 3}) == {"step": 3}
    assert (tmp_path / "train" / "step_000003.pkl").is_file() and calls == [1]
    mock = RolloutStore(RolloutMockConfig(enable=True, mode="mock", dump_dir=str(tmp_path)))
    assert mock.replaying and mock.around("train", 3, lambda: calls.append(2)) == {"step": 3} and calls == [1]
    with pytest.raises(FileNotFoundError, match="no dump for val step 3"):
        mock.around("val", 3, lambda: None)
    off = RolloutStore(RolloutMockConfig(enable=False, mode="mock", dump_dir=str(tmp_path)))
    assert off.around("train", 3, lambda: "generated") == "generated"
    config = load_rlvr_config(rlvr_dict(rollout_mock={"enable": True, "mode": "mock", "dump_dir": "/d"}))
    assert (config.rollout_mock.mode, config.rollout_mock.dump_dir) == ("mock", "/d")
