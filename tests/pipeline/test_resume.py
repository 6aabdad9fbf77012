"""Acceptance: a run stopped after a checkpoint and restarted with resume_from_checkpoint: true continues
at the next step with the same data order — and, in fp32 on CPU, with bit-identical samples, metrics
and weights (tolerance: exact equality; every random draw is seeded per step and restored on resume).

Three pipelines in one Ray session: A runs 4 steps uninterrupted (the session's `uninterrupted_run`, shared with
the async-rollout tests); B runs 2 steps (checkpoint at step 2),
then a new pipeline resumes B's run with max_steps=4. B keeps its checkpoints in a checkpoint_dir of their own
(ROLL's checkpoint_config.output_dir), apart from its output_dir.
"""

import json

import pytest
import torch
from safetensors.torch import load_file

from roll.pipeline.core.callbacks import read_samples
from tests.pipeline.helpers import NO_REFERENCE, run_pipeline, trained_weights

pytestmark = pytest.mark.usefixtures("ray_session")

STEPS, STOP = 4, 2
# Wall-clock metrics differ between any two runs; everything else must match exactly.
# system/sent_bytes: what a call carries depends on which keys the batch held when it was sent (a dump run
# scores before the forward passes, the overlapped run beside them), not on the numbers
NONDETERMINISTIC = ("timing/", "weight_sync/seconds", "system/sent_bytes")


@pytest.fixture(scope="module")
def runs(rlvr_config, uninterrupted_run, tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")

    def run(out, samples, *overrides):
        config = rlvr_config(root / out, ["save_steps=2", NO_REFERENCE, *overrides])
        return run_pipeline(config, sample_dir=root / samples, inspect=trained_weights)

    full = uninterrupted_run["history"]  # 4 steps, save_steps=2 (tests/pipeline/conftest.py)
    (root / "full").symlink_to(uninterrupted_run["out"])
    (root / "full_samples").symlink_to(uninterrupted_run["samples"])
    apart = f"checkpoint_dir={root / 'stopped_checkpoints'}"
    stopped = run("stopped", "stopped_samples", f"max_steps={STOP}", apart)
    resumed = run("stopped", "resumed_samples", f"max_steps={STEPS}", "resume_from_checkpoint=true", apart)
    return {"root": root, "full": full, "stopped": stopped, "resumed": resumed}


def _deterministic(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(NONDETERMINISTIC)}


def test_resumed_run_continues_at_the_next_step_with_the_same_prompts(runs):
    root, resumed = runs["root"], runs["resumed"]
    assert runs["stopped"]["first_step"] == 0 and sorted(runs["stopped"]["steps"]) == [0, 1]
    assert resumed["first_step"] == STOP  # 0-based index 2 = step 3
    assert sorted(resumed["steps"]) == [2, 3]
    assert resumed["before"] == {}  # no "before training" validation on a resumed run
    for step in (3, 4):  # 1-based, as the sample files and the progress line count
        full = read_samples(root / "full_samples", step)
        again = read_samples(root / "resumed_samples", step)
        assert [r["prompt"] for r in again] == [r["prompt"] for r in full], f"step {step}: data order differs"
        assert again == full, f"step {step}: same prompts but different samples (responses, scores)"
    assert not (root / "resumed_samples" / "step-1.jsonl").exists()
    # the stopped run drew the first two steps' prompts, and none of them is drawn again
    first = {r["prompt"] for step in (1, 2) for r in read_samples(root / "stopped_samples", step)}
    assert first == {r["prompt"] for step in (1, 2) for r in read_samples(root / "full_samples", step)}


def test_metrics_and_weights_match_the_uninterrupted_run_exactly(runs):
    full, stopped, resumed = runs["full"], runs["stopped"], runs["resumed"]
    for step in range(STEPS):
        other = stopped if step < STOP else resumed
        assert _deterministic(other["steps"][step]) == _deterministic(full["steps"][step]), f"step {step + 1}"
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
        assert all(torch.isfinite(torch.tensor(full["steps"][s][key])) for s in range(STEPS)), key
    weights, expected = resumed["inspected"], full["inspected"]
    assert weights.keys() == expected.keys()
    assert all(torch.equal(weights[name], expected[name]) for name in expected)
    assert not all(torch.equal(stopped["inspected"][n], expected[n]) for n in expected)  # steps 3-4 trained


def test_old_log_prob_pass_runs_on_the_first_step_only_also_after_a_resume(runs):
    """The demo (hf_infer and deepspeed_train in float32, synchronous): the first step runs actor_train's
    old-log-prob pass and finds the rollout log-probs equal to it (float32 rounding); every step then trains on
    the rollout log-probs and the later steps skip the pass. The resumed run goes on from the checkpoint's
    measurement (its steps match the uninterrupted ones exactly: test above)."""
    full, resumed = runs["full"]["steps"], runs["resumed"]["steps"]
    assert full[0]["old_log_probs/max_abs_diff"] < 1e-5 and "mismatch/mismatch_kl" in full[0]
    assert all(full[step]["old_log_probs/reused"] == 1.0 for step in range(STEPS))
    assert "timing/old_log_probs" in full[0]
    later = [full[step] for step in range(1, STEPS)] + [resumed[step] for step in range(STOP, STEPS)]
    assert not any(key in m for m in later for key in ("timing/old_log_probs", "old_log_probs/max_abs_diff"))


@pytest.fixture(scope="module")
def sequential(rlvr_config, tmp_path_factory):
    """The uninterrupted run's config with its independent phases one after another (overlap_phases off)."""
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    root = tmp_path_factory.mktemp("sequential")
    RLVRPipeline.overlap_phases = False
    try:
        config = rlvr_config(root / "out", ["max_steps=4", "save_steps=2", NO_REFERENCE])
        return run_pipeline(config, inspect=trained_weights)
    finally:
        RLVRPipeline.overlap_phases = True


def test_overlapped_phases_give_the_sequential_numbers_exactly(uninterrupted_run, sequential):
    """Rewards scored while the old log-probs are computed (the uninterrupted run) against one after another:
    every step's metrics and the final weights are bit-identical (same thread settings either way)."""
    full = uninterrupted_run["history"]
    # it did overlap on step 1 (later steps reuse the rollout log-probs and, with no reference, nothing else
    # runs beside the rewards)
    assert full["steps"][0]["timing/overlap"] > 0
    assert not any("timing/overlap" in m for m in sequential["steps"].values())
    for step in range(STEPS):
        assert _deterministic(sequential["steps"][step]) == _deterministic(full["steps"][step]), f"step {step + 1}"
    assert all(torch.equal(sequential["inspected"][n], full["inspected"][n]) for n in full["inspected"])


def test_checkpoints_are_complete_atomic_step_directories(runs):
    root = runs["root"] / "stopped_checkpoints" / "checkpoints"
    assert not (runs["root"] / "stopped" / "checkpoints").exists()  # checkpoint_dir, not output_dir
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-2", "step-4"]  # no *.tmp left behind
    assert (root / "latest").read_text().strip() == "step-4"
    step2 = root / "step-2"
    for name in (
        "pipeline_state.pt",
        "actor_train/engine",
        "actor_train/hf/model.safetensors",
        "actor_train/hf/config.json",
        "actor_train/hf/tokenizer.json",
    ):
        assert (step2 / name).exists(), name
    state = torch.load(step2 / "pipeline_state.pt", weights_only=True)  # plain data only
    assert state["completed_steps"] == 2
    assert state["sampler"] == {"epoch": 0, "cursor": 2 * 8}  # two steps of rollout_batch_size=8 prompts
    # the loadable HF copy of step 4 holds the final weights; step 2 equals the uninterrupted run's step 2
    final = load_file(root / "step-4" / "actor_train" / "hf" / "model.safetensors")
    assert all(torch.equal(final[name], runs["full"]["inspected"][name]) for name in final)
    full_step2 = load_file(
        runs["root"] / "full" / "checkpoints" / "step-2" / "actor_train" / "hf" / "model.safetensors"
    )
    assert all(torch.equal(full_step2[n], t) for n, t in load_file(step2 / "actor_train/hf/model.safetensors").items())
    assert json.loads((step2 / "actor_train" / "hf" / "config.json").read_text())["model_type"] == "qwen2"
