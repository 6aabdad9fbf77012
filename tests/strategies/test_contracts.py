"""What strategies declare (roll/strategies/base.py): the TrainStrategy interface, capability flags read by
the config checks through the registry (also without any engine installed), the one sampling-settings
merge, and "a new engine = one class + one registry line"."""

import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from roll.configs.worker import GeneratingArgs, ModelArgs, StrategyArgs, WorkerConfig
from roll.strategies import _STRATEGIES, create_strategy, strategy_class, strategy_names
from roll.strategies.base import ROLES, InferenceStrategy, TrainStrategy
from tests.configs.test_config import error_of, tiny

REPO = Path(__file__).resolve().parents[2]
FLAGS = ("rollout_log_probs", "sum_pi_squared", "dynamic_batching_train", "dynamic_batching_infer", "sequence_packing")
ENGINES = ("vllm", "sglang", "megatron", "deepspeed")
# What each engine can do; a change here changes what the config checks accept (docs/strategies.md).
EXPECTED = {
    "hf_infer": (
        {"generate", "score"},
        {"rollout_log_probs", "sum_pi_squared", "dynamic_batching_infer", "sequence_packing"},
    ),
    "deepspeed_train": ({"train", "critic"}, set(FLAGS) - {"rollout_log_probs"}),
    "deepspeed_infer": ({"score"}, {"sum_pi_squared", "dynamic_batching_infer", "sequence_packing"}),
    "vllm": ({"generate"}, {"rollout_log_probs"}),
    "sglang": ({"generate"}, {"rollout_log_probs"}),
    "fsdp2_train": ({"train", "critic"}, set(FLAGS) - {"rollout_log_probs"}),
    "fsdp2_infer": ({"score"}, {"sum_pi_squared", "dynamic_batching_infer", "sequence_packing"}),
    "megatron_train": (
        {"train"},
        {"sum_pi_squared", "dynamic_batching_train", "dynamic_batching_infer", "sequence_packing"},
    ),
    "megatron_infer": ({"score"}, {"sum_pi_squared", "dynamic_batching_infer", "sequence_packing"}),
}


LORA = ("deepspeed_train", "fsdp2_train", "megatron_train")  # model_args.lora_*


def capabilities(cls) -> dict:
    return {"roles": sorted(cls.roles), "flags": sorted(f for f in FLAGS if getattr(cls, f)), "lora": cls.lora}


@dataclass
class StandInWorker:  # test double for roll.distributed.worker.Worker: what a strategy reads
    worker_config: object
    rank: int = 0
    world_size: int = 1


class EchoRolloutStrategy(InferenceStrategy):
    """Test double for a new rollout engine: a class with its capability flags, nothing else."""

    roles = frozenset({"generate"})


# --- the interface -------------------------------------------------------------------------------------------
def test_registered_strategies_declare_what_they_can_do():
    assert {name: capabilities(strategy_class(name)) for name in strategy_names()} == {
        name: {"roles": sorted(roles), "flags": sorted(flags), "lora": name in LORA}
        for name, (roles, flags) in EXPECTED.items()
    }
    for name in strategy_names():
        cls = strategy_class(name)
        trains = bool({"train", "critic"} & cls.roles)
        assert issubclass(cls, TrainStrategy) == trains, name
        assert not inspect.isabstract(cls), f"{name}: {sorted(getattr(cls, '__abstractmethods__', ()))}"


def test_train_strategy_methods_are_required_and_roles_are_checked():
    class HalfEngine(TrainStrategy):  # test double: trains but cannot export, save, load or offload
        roles = frozenset({"train"})

        def initialize(self, total_steps=0):
            pass

        def train_step(self, batch, loss_fn):
            return {}

    with pytest.raises(TypeError, match="load_checkpoint.*named_hf_parameters.*offload.*reload.*save_checkpoint"):
        HalfEngine(StandInWorker(SimpleNamespace(name="actor_train")))
    with pytest.raises(TypeError, match="declares roles \\['critic'\\]: it must subclass TrainStrategy"):
        type("NoTrainer", (InferenceStrategy,), {"roles": frozenset({"critic"})})
    with pytest.raises(TypeError, match=re.escape(f"unknown roles ['trainer']; valid: {list(ROLES)}")):
        type("Typo", (InferenceStrategy,), {"roles": frozenset({"trainer"})})


def test_unknown_name_lists_the_registry():
    with pytest.raises(ValueError, match="unknown strategy_name 'vlm'; valid: \\['deepspeed_infer'"):
        strategy_class("vlm")


def test_capabilities_are_read_without_any_engine_installed(tmp_path):
    """A --dry_run user may have none of vllm / sglang / megatron / deepspeed: importing every registered
    class, reading its flags and running the config checks must not import them."""
    script = textwrap.dedent(
        f"""
        import json, sys
        for name in {ENGINES!r}:
            sys.modules[name] = None  # `import name` now raises ImportError
        try:
            import deepspeed
            blocked = False
        except ImportError:
            blocked = True
        from roll.strategies import strategy_class, strategy_names
        from tests.strategies.test_contracts import capabilities
        from tests.configs.test_config import tiny

        caps = {{name: capabilities(strategy_class(name)) for name in strategy_names()}}
        config = tiny(
            "actor_train.strategy_args.strategy_name=megatron_train",
            "actor_train.strategy_args.strategy_config={{tensor_model_parallel_size: 1}}",
            "actor_infer.strategy_args.strategy_name=vllm",
            "reference.strategy_args.strategy_name=deepspeed_infer",
        )
        loaded = sorted(m for m, v in sys.modules.items() if m.split(".")[0] in {ENGINES!r} and v is not None)
        train = config.actor_train.strategy_args.strategy_name
        print(json.dumps({{"blocked": blocked, "caps": caps, "loaded": loaded, "train": train}}))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["blocked"] and out["loaded"] == [] and out["train"] == "megatron_train"
    assert out["caps"] == {name: capabilities(strategy_class(name)) for name in strategy_names()}


# --- config checks read the flags from the registry ------------------------------------------------------------
def test_a_new_engine_is_one_class_and_one_registry_line(monkeypatch):
    monkeypatch.setitem(_STRATEGIES, "echo_rollout", f"{__name__}.EchoRolloutStrategy")
    assert tiny("actor_infer.strategy_args.strategy_name=echo_rollout").actor_infer.strategy_args.strategy_name == (
        "echo_rollout"
    )
    config = WorkerConfig(name="actor_infer", strategy_args=StrategyArgs(strategy_name="echo_rollout"))
    assert isinstance(create_strategy("echo_rollout", StandInWorker(config)), EchoRolloutStrategy)
    # listed for the role it declares, refused for the others with the strategies that do serve them
    assert "choose one of ['hf_infer', 'vllm', 'sglang', 'echo_rollout']" in error_of(
        "actor_infer.strategy_args.strategy_name=fsdp2_infer"
    )
    for role, valid in (
        ("reference", ["hf_infer", "deepspeed_infer", "fsdp2_infer", "megatron_infer"]),
        ("actor_train", ["deepspeed_train", "fsdp2_train", "megatron_train"]),
    ):
        message = error_of(f"{role}.strategy_args.strategy_name=echo_rollout")
        assert f"'{role}.strategy_args.strategy_name' = 'echo_rollout' cannot serve this role" in message
        assert f"choose one of {valid}" in message
    # its flags are what the checks read: no rollout log-probs, no dynamic batching ...
    message = error_of("actor_infer.strategy_args.strategy_name=echo_rollout", "rollout_is_threshold=2.0")
    assert "actor_infer strategy 'echo_rollout' does not return per-token log-probs" in message
    assert "use one of ['hf_infer', 'vllm', 'sglang']" in message
    message = error_of(
        "actor_infer.strategy_args.strategy_name=echo_rollout",
        "actor_infer.use_dynamic_batching_in_infer=true",
        "actor_infer.max_tokens_per_microbatch_in_infer=64",
    )
    assert "'actor_infer.use_dynamic_batching_in_infer' is not supported for role actor_infer" in message
    # ... until the class says otherwise
    monkeypatch.setattr(EchoRolloutStrategy, "rollout_log_probs", True)
    monkeypatch.setattr(EchoRolloutStrategy, "dynamic_batching_infer", True)
    tiny(
        "actor_infer.strategy_args.strategy_name=echo_rollout",
        "rollout_is_threshold=2.0",
        "actor_infer.use_dynamic_batching_in_infer=true",
        "actor_infer.max_tokens_per_microbatch_in_infer=64",
    )


def test_critic_and_megatron_limits_come_from_the_classes():
    megatron = (
        "actor_train.strategy_args.strategy_name=megatron_train",
        "actor_train.device_mapping='list(range(0, 2))'",
        "actor_train.training_args.per_device_train_batch_size=256",
    )
    config = tiny(*megatron, "actor_train.strategy_args.strategy_config={tensor_model_parallel_size: 2}")
    from roll.pipeline.rlvr.config_checks import batch_plan

    assert batch_plan(config).dp_size["actor_train"] == 1  # 2 workers / TP 2
    message = error_of(*megatron, "actor_train.strategy_args.strategy_config={tensor_model_parallel_size: 3}")
    assert "actor_train: world_size 2 is not divisible by tensor × pipeline × context parallel size = 3" in message
    message = error_of(
        *megatron,
        "actor_train.strategy_args.strategy_config={pipeline_model_parallel_size: 2}",
        "actor_train.use_dynamic_batching_in_train=true",
        "actor_train.max_tokens_per_microbatch_in_train=64",
    )
    assert "'actor_train.use_dynamic_batching_in_train' with megatron_train: needs pipeline_model_parallel_size 1" in (
        message
    )
    message = error_of("adv_estimator=optimal_token_baseline", "actor_train.strategy_args.strategy_name=hf_infer")
    assert "choose one of ['deepspeed_train', 'fsdp2_train', 'megatron_train']" in message


# --- one sampling-settings merge -------------------------------------------------------------------------------
def _worker_config(model_dir="unused", strategy_name="hf_infer") -> WorkerConfig:
    return WorkerConfig(
        name="actor_infer",
        model_args=ModelArgs(model_name_or_path=str(model_dir)),
        generating_args=GeneratingArgs(max_new_tokens=5, temperature=0.7, top_k=3, num_return_sequences=4),
        strategy_args=StrategyArgs(strategy_name=strategy_name),
    )


def test_sampling_settings_merge_generating_args_with_one_calls_overrides():
    strategy = InferenceStrategy(StandInWorker(_worker_config(strategy_name="vllm")))
    defaults = {
        "max_new_tokens": 5,
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": 3,
        "do_sample": True,
        "repetition_penalty": 1.0,
        "stop_strings": None,
    }
    assert strategy.sampling_settings(None) == {**defaults, "num_return_sequences": 4}
    assert strategy.sampling_settings({"num_return_sequences": 1, "do_sample": False}) == {
        **defaults,
        "num_return_sequences": 1,
        "do_sample": False,
    }
    assert strategy.sampling_settings({"seed": 3, "top_p": 0.5}, request=True) == {
        **defaults,
        "top_p": 0.5,
        "num_return_sequences": 1,
        "seed": 3,
    }
    assert strategy.sampling_settings({}, request=True)["seed"] is None
    with pytest.raises(ValueError, match=r"vllm: unknown generation settings \['seed'\].*meta_info\['seed'\]"):
        strategy.sampling_settings({"seed": 1})
    with pytest.raises(ValueError, match=r"vllm: unknown request sampling keys \['num_return_sequences'\]"):
        strategy.sampling_settings({"num_return_sequences": 2}, request=True)
    for cls in (strategy_class("hf_infer"), strategy_class("vllm"), strategy_class("sglang")):
        assert cls.sampling_settings is InferenceStrategy.sampling_settings  # no engine keeps its own copy


def test_hf_infer_generates_with_the_merged_settings(tmp_path):
    from roll.demo.tiny_model import build_tiny_model
    from roll.distributed.data_proto import DataProto

    model = build_tiny_model(str(tmp_path / "model"), [f"w{i}" for i in range(30)])
    hf = create_strategy("hf_infer", StandInWorker(_worker_config(model)))
    hf.initialize()
    prompts = torch.tensor([[0, 5, 6], [7, 8, 9]])
    batch = DataProto.from_dict(tensors={"prompts": prompts, "attention_mask": (prompts > 0).long()})
    out = hf.generate(batch, {"num_return_sequences": 2, "max_new_tokens": 3})
    assert out.batch["responses"].shape == (4, 3)  # the call's overrides, not generating_args' 4 × 5
    assert hf.generate(batch, {}).batch["responses"].shape == (8, 5)
    result = hf.generate_request("r", [5, 6], {"do_sample": False, "max_new_tokens": 2})
    assert len(result.token_ids) <= 2
    with pytest.raises(ValueError, match=r"hf_infer: unknown generation settings \['n'\]"):
        hf.generate(batch, {"n": 2})
    with pytest.raises(ValueError, match=r"hf_infer: unknown request sampling keys \['num_return_sequences'\]"):
        hf.generate_request("r", [5, 6], {"num_return_sequences": 2})


def test_hf_infer_generates_the_same_whatever_the_prompts_left_padding(tmp_path):
    """hf_infer generates from the batch's longest prompt: the same prompts padded to a wider prompt_length give
    the same samples, log-probs and masks (the prompt columns keep their width)."""
    from roll.demo.tiny_model import build_tiny_model
    from roll.distributed.data_proto import DataProto

    model = build_tiny_model(str(tmp_path / "model"), [f"w{i}" for i in range(30)])
    hf = create_strategy("hf_infer", StandInWorker(_worker_config(model)))
    hf.initialize()
    tight = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11], [0, 0, 12, 13]])
    outputs = []
    for extra in (0, 5):
        prompts = torch.nn.functional.pad(tight, (extra, 0))
        batch = DataProto.from_dict(tensors={"prompts": prompts, "attention_mask": (prompts > 0).long()})
        batch.meta_info["seed"] = 11
        outputs.append(hf.generate(batch, {"num_return_sequences": 2, "max_new_tokens": 6}))
    narrow, wide = outputs
    assert wide.batch["prompts"].shape[1] == narrow.batch["prompts"].shape[1] + 5
    for key in ("responses", "response_mask"):
        assert torch.equal(narrow.batch[key], wide.batch[key]), key
    assert (narrow.batch["rollout_log_probs"] - wide.batch["rollout_log_probs"]).abs().max() < 1e-6
