"""The weight-sync check compares like with like, and its policy (weight_sync_check, weight_sync_full_check_steps).

No Ray: the pipeline's WeightSync runs on one-worker role doubles (tests/strategies/vllm_scenarios.RoleDouble)
around real hf_infer strategies on a tiny model, through the real transfer methods (object store path, handed
over in-process). The "trainer" holds fp32 weights (the master copy of mixed precision), the engine serves
bf16, as every GPU run with model_args.dtype bfloat16 does. On c1685f7 the first test fails at the start-up
check (the trainer's fp32 checksum against the engine's bf16 one).
"""

from pathlib import Path

import pytest
import torch

from roll.pipeline.core.weight_sync import WeightSync, WeightSyncError
from tests.strategies.vllm_scenarios import RoleDouble, StandInWorker, perturbed_copy, prompt_batch

WORDS = [f"w{i}" for i in range(60)] + ["the answer is", "add", "two", "numbers"]


def hf_infer(model_dir, dtype: str):
    from roll.configs.worker import GeneratingArgs, ModelArgs, StrategyArgs, WorkerConfig
    from roll.strategies import create_strategy

    config = WorkerConfig(
        name="actor_infer",
        model_args=ModelArgs(model_name_or_path=str(model_dir), dtype=dtype),
        generating_args=GeneratingArgs(max_new_tokens=4, num_return_sequences=1),
        strategy_args=StrategyArgs(strategy_name="hf_infer"),
        world_size=1,
        infer_batch_size=4,
    )
    strategy = create_strategy("hf_infer", StandInWorker(config))
    strategy.initialize()
    return strategy


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from roll.demo.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("check")
    base = build_tiny_model(str(root / "base"), WORDS, seed=5)
    return base, perturbed_copy(base, root / "trained", seed=1)


@pytest.fixture
def roles(models):
    """(trainer: fp32 trained weights, engine: bf16 base weights, stale until synced)."""
    base, trained = models
    return RoleDouble(hf_infer(trained, "float32")), RoleDouble(hf_infer(base, "bfloat16"))


def make_sync(trainer, engine, **policy) -> WeightSync:
    probe = prompt_batch(trainer.strategy.model.config.vocab_size, rows=1, seed=3)
    return WeightSync(trainer, engine, probe, **policy)


def test_bf16_engine_of_fp32_master_weights_passes_and_holds_their_rounding(roles):
    trainer, engine = roles
    metrics = make_sync(trainer, engine).sync_and_verify(step=-1)  # WeightSync's own default: check in full
    assert metrics["weight_sync/probe_max_abs_diff"] <= 5e-2
    master = trainer.get_weights()[0]
    served = engine.get_weights()[0]
    assert all(served[n].dtype == torch.bfloat16 and torch.equal(served[n], master[n].bfloat16()) for n in master)
    fp32_mb = sum(t.numel() * 4 for t in master.values()) / 2**20
    assert metrics["weight_sync/size_mb"] == pytest.approx(fp32_mb / 2)  # sent as bf16: half the bytes


def test_which_syncs_are_checked():
    def plan(check, every, steps=6):
        sync = WeightSync.__new__(WeightSync)  # check_for_step reads only the policy
        sync.check, sync.full_check_steps = check, every
        return [sync.check_for_step(-1, initial=True)] + [sync.check_for_step(step) for step in range(steps)]

    assert plan("full", 0) == ["full"] * 7
    assert plan("checksum", 0) == ["full"] + ["checksum"] * 6
    assert plan("off", 0) == ["full"] + ["off"] * 6
    # after steps 3 and 6 (N steps trained, as save_steps counts)
    assert plan("checksum", 3) == ["full", "checksum", "checksum", "full", "checksum", "checksum", "full"]
    assert plan("off", 2) == ["full", "off", "full", "off", "full", "off", "full"]


def test_policy_errors_name_the_key_and_the_valid_values(roles):
    trainer, engine = roles
    with pytest.raises(ValueError, match=r"weight_sync_check = 'sometimes'; valid: \['full', 'checksum', 'off'\]"):
        make_sync(trainer, engine, check="sometimes")
    with pytest.raises(ValueError, match="weight_sync_full_check_steps = -1: must be >= 0"):
        make_sync(trainer, engine, check="checksum", full_check_steps=-1)


def test_config_refuses_a_full_check_interval_that_does_nothing():
    from roll.configs.base import PipelineConfig
    from roll.configs.loader import ConfigError
    from roll.configs.rollout import RolloutConfig

    assert RolloutConfig().weight_sync_check == "checksum"
    assert not hasattr(PipelineConfig(), "weight_sync_check")  # a kind without generation has no weight sync keys
    with pytest.raises(ConfigError, match="'weight_sync_full_check_steps' = 5 has no effect with weight_sync_check"):
        RolloutConfig(weight_sync_check="full", weight_sync_full_check_steps=5)
    from roll.configs import compose_config
    from roll.pipeline.rlvr.config import load_rlvr_config

    tiny = str(Path(__file__).resolve().parents[2] / "examples" / "tiny_rlvr")
    with pytest.raises(ConfigError, match="'weight_sync_full_check_steps' = -2: must be ≥ 0"):  # the loader's range
        load_rlvr_config(compose_config(tiny, "rlvr_tiny", ["weight_sync_full_check_steps=-2"]))


def test_off_and_checksum_still_check_the_start_up_sync_in_full(roles):
    trainer, engine = roles
    for check in ("off", "checksum"):
        sync = make_sync(trainer, engine, check=check)
        start = sync.sync_and_verify(step=-1, initial=True)
        assert start["weight_sync/checked"] == 2 and "weight_sync/probe_max_abs_diff" in start
        after = sync.sync_and_verify(step=0)
        assert after["weight_sync/checked"] == {"off": 0, "checksum": 1}[check]
        assert "weight_sync/probe_max_abs_diff" not in after


def test_checksum_mode_catches_a_stale_tensor(roles):
    trainer, engine = roles
    sync = make_sync(trainer, engine, check="checksum")
    sync.sync_and_verify(step=-1, initial=True)
    with torch.no_grad():  # the next step trains: every weight moves
        for param in trainer.strategy.model.parameters():
            param.add_(0.01)
    name = "model.layers.1.mlp.down_proj.weight"
    served = dict(engine.strategy.module.named_parameters())
    # a loader that skips one tensor (a partial load): the engine keeps its old value
    engine.transfer.strategy.load_weights = lambda items: [served[n].copy_(t) for n, t in items if n != name]
    with pytest.raises(WeightSyncError, match="step 1: after weight sync actor_infer rank 0 serves parameter checksum"):
        sync.sync_and_verify(step=0)
    off = make_sync(trainer, engine, check="off")  # off: the same stale tensor goes unnoticed, as documented
    assert off.sync_and_verify(step=0)["weight_sync/checked"] == 0
