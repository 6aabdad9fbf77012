"""Off-policy rollout (async_generation_ratio, docs/async.md) on the demo, engine and trainer on separate
virtual devices. Two 3-step pipelines in one Ray session (each start-up costs most of the time):

  sync   async_generation_ratio: 0 (the synchronous loop)
  async  ratio 2 with async_max_lag: 1: step 1 is on-policy (lag 0), step 2 trains on samples of step 1's
         policy (lag 1, allowed), step 3's batch was queued at step 1 (lag 2 > 1) so it is regenerated with
         the current weights; a checkpoint after step 2 is taken with step 3's rollout in flight
"""

import pytest
import torch

from roll.configs import ConfigError
from roll.pipeline.core.callbacks import read_samples
from roll.pipeline.rlvr.async_rollout import stale_action
from tests.pipeline.helpers import run_pipeline, trained_weights

pytestmark = pytest.mark.usefixtures("ray_session")

STEPS, GROUP = 3, 8 * 4  # samples per step: 8 prompts x 4


@pytest.fixture(scope="module")
def runs(rlvr_config, tmp_path_factory):
    root = tmp_path_factory.mktemp("async")

    def run(name, *overrides):
        config = rlvr_config(root / name, [f"max_steps={STEPS}", "save_steps=2", *overrides])
        return run_pipeline(config, sample_dir=root / f"{name}_samples", inspect=trained_weights)

    return {
        "root": root,
        "sync": run("sync", "async_generation_ratio=0"),
        "async": run("async", "async_generation_ratio=2", "async_max_lag=1", "async_stale_samples=regenerate"),
    }


def test_ratio_zero_is_the_synchronous_loop(runs):
    sync = runs["sync"]
    assert not any(key.startswith(("async/", "mismatch/lag_")) for m in sync["steps"].values() for key in m)


def test_async_trains_off_policy_within_the_bound_on_the_same_prompts(runs):
    root, run = runs["root"], runs["async"]
    steps = [run["steps"][s] for s in range(STEPS)]
    assert [m["async/lag"] for m in steps] == [0.0, 1.0, 0.0]  # step 3: regenerated (lag 2 > async_max_lag)
    assert [m["async/regenerated_samples"] for m in steps] == [0, 0, GROUP]
    assert steps[-1]["async/regenerated_samples_total"] == GROUP
    assert all(m["async/dropped_samples"] == 0 for m in steps)
    for step in range(STEPS):
        got, want = read_samples(root / "async_samples", step + 1), read_samples(root / "sync_samples", step + 1)
        assert [r["prompt"] for r in got] == [r["prompt"] for r in want], f"step {step + 1}: data order differs"
    # step 1 is on-policy and identical to the synchronous run; step 2 was sampled by the step-0 policy
    assert read_samples(root / "async_samples", 1) == read_samples(root / "sync_samples", 1)
    assert read_samples(root / "async_samples", 2) != read_samples(root / "sync_samples", 2)
    assert run["steps"][0]["actor/pg_loss"] == runs["sync"]["steps"][0]["actor/pg_loss"]
    # mismatch metrics per policy-version lag: behaviour policy (rollout log-probs) vs the current trainer
    lag1 = {k: v for k, v in steps[1].items() if k.startswith("mismatch/lag_1/")}
    assert lag1 and all(torch.isfinite(torch.tensor(v)) for v in lag1.values())
    assert any(k.startswith("mismatch/lag_0/") for k in steps[0])
    assert not any(k.startswith("mismatch/lag_2/") for m in steps for k in m)  # never trained on
    assert not all(torch.equal(run["inspected"][n], t) for n, t in runs["sync"]["inspected"].items())


def test_checkpoint_stores_the_data_position_before_the_queued_rollout(runs):
    for name in ("sync", "async"):
        path = runs["root"] / name / "checkpoints" / "step-2" / "pipeline_state.pt"
        state = torch.load(path, weights_only=True)
        # async: step 3's prompts were drawn (its rollout in flight) but not trained; a resume draws them again
        assert state["completed_steps"] == 2 and state["sampler"] == {"epoch": 0, "cursor": 2 * 8}, name


def test_colocated_engine_is_refused(rlvr_config, tmp_path):
    with pytest.raises(ConfigError, match="actor_infer and actor_train are colocated on device"):
        rlvr_config(tmp_path, ["async_generation_ratio=1", "actor_infer.device_mapping=[0]"])
    with pytest.raises(ConfigError, match="whole number"):
        rlvr_config(tmp_path, ["async_generation_ratio=0.5"])


def test_stale_action():
    assert stale_action(1, 1, "drop") is None
    assert stale_action(2, 1, "drop") == "drop"
    assert stale_action(1, 0, "regenerate") == "regenerate"
