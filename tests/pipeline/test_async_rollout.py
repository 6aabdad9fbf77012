"""Off-policy rollout (async_generation_ratio, docs/async.md) on the demo, engine and trainer on separate
virtual devices. Two 4-step pipelines in one Ray session (each start-up costs most of the time):

  sync   async_generation_ratio: 0 (the synchronous loop): the session's `uninterrupted_run` (same config)
  async  ratio 2 with async_max_lag: 1: step 1 is on-policy (lag 0), step 2 trains on samples of step 1's
         policy (lag 1, allowed), step 3's batch was queued at step 1 (lag 2 > 1) so it is regenerated with
         the current weights; a checkpoint after step 2 is taken with steps 3-4 in flight. actor_infer is
         SIGKILLed at the end of step 3 (max_failures: 1): step 4's generate finds it dead, the roles restart
         and steps 3-4 are redone from the step-2 checkpoint (queue empty: lags 0 and 1)
"""

import io
import logging

import pytest
import torch

from roll.configs import ConfigError
from roll.pipeline.core.callbacks import read_samples
from roll.pipeline.rlvr.rollout.base import stale_action
from tests.pipeline.helpers import NO_REFERENCE, trained_weights
from tests.reliability.test_recovery import KillWorker

pytestmark = pytest.mark.usefixtures("ray_session")

STEPS, GROUP = 4, 8 * 4  # samples per step: 8 prompts x 4


@pytest.fixture(scope="module")
def runs(rlvr_config, uninterrupted_run, tmp_path_factory):
    from roll.pipeline.core.callbacks import SampleLogger
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    root = tmp_path_factory.mktemp("async")

    def run(name, *overrides, kill=None):
        config = rlvr_config(root / name, [f"max_steps={STEPS}", "save_steps=2", NO_REFERENCE, *overrides])
        log = io.StringIO()
        handler = logging.StreamHandler(log)
        logging.getLogger("roll.pipeline").addHandler(handler)
        callbacks = [SampleLogger(str(root / f"{name}_samples"))] + ([kill] if kill else [])
        try:
            with RLVRPipeline(config, callbacks=callbacks) as pipeline:
                if kill:
                    kill.pipeline = pipeline
                history = pipeline.run()
                history["weights"] = trained_weights(pipeline)
        finally:
            logging.getLogger("roll.pipeline").removeHandler(handler)
        history["log"] = log.getvalue()
        return history

    (root / "sync").symlink_to(uninterrupted_run["out"])  # the same config with async_generation_ratio: 0
    (root / "sync_samples").symlink_to(uninterrupted_run["samples"])
    return {
        "root": root,
        "sync": uninterrupted_run["history"],
        "async": run(
            "async",
            "async_generation_ratio=2",
            "async_max_lag=1",
            "async_stale_samples=regenerate",
            "max_failures=1",
            "track_with=tensorboard",
            kill=KillWorker("actor_infer", at_step=2),
        ),
    }


def test_ratio_zero_is_the_synchronous_loop(runs):
    sync = runs["sync"]
    assert not any(key.startswith(("async/", "mismatch/lag_")) for m in sync["steps"].values() for key in m)


def test_async_trains_off_policy_within_the_bound_on_the_same_prompts(runs):
    root, run = runs["root"], runs["async"]
    steps = [run["steps"][s] for s in range(STEPS)]
    # steps 3-4 are the redo after the recovery: a fresh queue from the step-2 checkpoint's weights
    assert [m["async/lag"] for m in steps] == [0.0, 1.0, 0.0, 1.0]
    assert all(m["async/dropped_samples"] == 0 for m in steps)
    # the first attempt at step 3 regenerated its batch (queued at step 1: lag 2 > async_max_lag 1)
    assert steps[-1]["async/regenerated_samples_total"] == GROUP
    for step in range(STEPS):
        got, want = read_samples(root / "async_samples", step + 1), read_samples(root / "sync_samples", step + 1)
        assert [r["prompt"] for r in got] == [r["prompt"] for r in want], f"step {step + 1}: data order differs"
    # step 1 is on-policy and identical to the synchronous run; step 2 was sampled by the step-0 policy
    assert read_samples(root / "async_samples", 1) == read_samples(root / "sync_samples", 1)
    assert read_samples(root / "async_samples", 2) != read_samples(root / "sync_samples", 2)
    # the same samples; the trainer's threads differ (synchronous: all cores while it trains alone; async: its
    # share, the engine generates beside it), so float sums may differ in the last bits
    assert steps[0]["actor/pg_loss"] == pytest.approx(runs["sync"]["steps"][0]["actor/pg_loss"], rel=1e-6)
    # mismatch metrics per policy-version lag: behaviour policy (rollout log-probs) vs the current trainer
    lag1 = {k: v for k, v in steps[1].items() if k.startswith("mismatch/lag_1/")}
    assert lag1 and all(torch.isfinite(torch.tensor(v)) for v in lag1.values())
    assert any(k.startswith("mismatch/lag_0/") for k in steps[0])
    assert not any(k.startswith("mismatch/lag_2/") for m in steps for k in m)  # never trained on


def test_staleness_metrics_reach_tensorboard(runs):
    """The `async/lag` histogram (each trained sample's lag) and the dropped/regenerated counts, read back from
    the run's event file as `tensorboard --logdir` would."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = (runs["root"] / "async").rglob("events.out.tfevents*")
    board = EventAccumulator(str(events.parent), size_guidance={"histograms": 0, "scalars": 0}).Reload()
    for key in ("async/lag", "async/dropped_samples", "async/regenerated_samples_total"):
        assert key in board.Tags()["scalars"], key
    lags = {event.step: event.histogram_value for event in board.Histograms("async/lag")}
    assert all(h.num == GROUP for h in lags.values())
    assert {(h.min, h.max) for h in lags.values()} == {(0.0, 0.0), (1.0, 1.0)}  # steps 1, 3: lag 0; steps 2, 4: lag 1
    assert sorted(lags) == sorted({event.step for event in board.Scalars("async/lag")})
    # TensorBoard counts steps as the progress line [N/max] and checkpoints step-N do: from 1 (issue 31)
    assert sorted(lags) == [1, 2, 3, 4]


def test_killed_engine_fails_clearly_and_resumes_from_the_checkpoint(runs):
    run = runs["async"]
    assert run["recoveries"] == 1 and runs["sync"]["recoveries"] == 0
    assert "recovery 1 of max_failures=1: actor_infer.generate: worker rank 0 died" in run["log"], run["log"]
    assert "resuming from the last complete checkpoint" in run["log"]
    # steps 1-2 ran once (checkpointed at 2), 3-4 were redone from step-2: each step's metrics once, on the
    # prompts the synchronous run drew for that step (checked above), none skipped or repeated
    assert sorted(run["steps"]) == list(range(STEPS)) and run["first_step"] == 0


def test_checkpoint_stores_the_data_position_before_the_queued_rollout(runs):
    for name in ("sync", "async"):
        path = runs["root"] / name / "checkpoints" / "step-2" / "pipeline_state.pt"
        state = torch.load(path, weights_only=True)
        # async: steps 3-4's prompts were drawn (rollouts in flight) but not trained; a resume draws them again
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
