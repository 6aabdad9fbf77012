"""Agentic reliability. Acceptance: a run stopped after a checkpoint and resumed with resume_from_checkpoint: true is
the uninterrupted run — same env seeds and episodes (the transcripts of every later step), same metrics and
final weights (fp32 on CPU: exact equality, wall-clock metrics aside).

Env seeds come from (seed, step, group, episode) and trajectory ids from the step, so no env-manager state
needs saving beyond the driver's RNG. Three small FrozenLake pipelines in the session's Ray: A runs 3 steps,
saving each; B is a run stopped right after its step-1 checkpoint (A's step-1 checkpoint, copied into B's
empty output_dir, is what such a run leaves) and resumed to 3; C is A with async_generation_ratio: 1. A
smaller batch than SMALL_AGENTIC keeps it ~1 min.
"""

import json
import shutil

import pytest
import torch

from roll.utils import checkpoint
from tests.pipeline.helpers import agentic_config, trained_weights

pytestmark = pytest.mark.usefixtures("ray_session")
STEPS, STOP = 3, 1
NONDETERMINISTIC = ("timing/", "weight_sync/seconds")
SMALLER = [
    "rollout_batch_size=16",
    "train_env_manager.num_env_groups=2",
    "train_env_manager.group_size=8",
    "sample_log_steps=1",
    "save_steps=1",
]


def _run(model, out, *overrides) -> dict:
    from roll.pipeline.agentic.pipeline import AgenticPipeline

    with AgenticPipeline(agentic_config(model, out, [*SMALLER, *overrides])) as pipeline:
        history = pipeline.run()
        history["weights"] = trained_weights(pipeline)
    return history


@pytest.fixture(scope="module")
def runs(agentic_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("agentic_resume")
    full = _run(agentic_model, root / "full", f"max_steps={STEPS}")
    checkpoints = checkpoint.checkpoint_root(str(root / "full"))
    shutil.copytree(checkpoints / f"step-{STOP}", checkpoint.checkpoint_root(str(root / "stopped")) / f"step-{STOP}")
    resumed = _run(agentic_model, root / "stopped", f"max_steps={STEPS}", "resume_from_checkpoint=true")
    async_ = _run(agentic_model, root / "async", f"max_steps={STEPS}", "async_generation_ratio=1")
    return {"root": root, "full": full, "resumed": resumed, "async": async_}


def _transcripts(out, step: int) -> list[dict]:
    path = out / "samples" / f"step-{step}.jsonl"
    return sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda t: t["env_id"])


def _deterministic(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(NONDETERMINISTIC)}


def test_agentic_resume_continues_with_the_same_episodes_metrics_and_weights(runs):
    root, full, resumed = runs["root"], runs["full"], runs["resumed"]
    assert resumed["first_step"] == STOP and sorted(resumed["steps"]) == list(range(STOP, STEPS))
    for step in range(STOP + 1, STEPS + 1):  # 1-based: the resumed run's steps
        again, expected = _transcripts(root / "stopped", step), _transcripts(root / "full", step)
        assert [t["turns"][0]["observation"] for t in again] == [t["turns"][0]["observation"] for t in expected]
        assert again == expected, f"step {step}: same maps but different episodes"
    for step in range(STOP, STEPS):
        assert _deterministic(resumed["steps"][step]) == _deterministic(full["steps"][step]), f"step {step + 1}"
    assert all(torch.equal(resumed["weights"][n], t) for n, t in full["weights"].items())
    # not trivially: the resumed steps changed the weights (some group had reward variance)
    assert max(full["steps"][step]["actor/grad_norm"] for step in range(STOP, STEPS)) > 0


def test_an_env_that_raises_in_reset_fails_the_step_naming_it_and_keeps_the_checkpoint(agentic_model, tmp_path):
    """16 resets per step: the 17th (step 2) raises. The step fails with the env's class, tag, env id and seed;
    step 1's checkpoint stays the latest and complete."""
    overrides = [
        "max_steps=2",
        "+custom_envs.Faulty.env_type=tests.reliability.faulty.ResetFailsEnv",
        "+custom_envs.Faulty.env_config={fail_after: 16}",
        "+custom_envs.Faulty.max_turns=1",
        "train_env_manager.tags=[Faulty]",
    ]
    with pytest.raises(Exception) as caught:
        _run(agentic_model, tmp_path, *overrides)
    message = str(caught.value)
    assert "train_env.start failed on rank 0" in message, message
    assert "environment tests.reliability.faulty.ResetFailsEnv (tag 'Faulty', env id 0, episode seed" in message
    assert "raised in reset: ConnectionError: the game server refused the connection" in message
    root = checkpoint.checkpoint_root(str(tmp_path))
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-1"]
    checkpoint.verify(checkpoint.find_checkpoint(str(tmp_path), True))


def test_async_rollout_plays_the_next_step_while_training_with_the_previous_weights(runs):
    """async_generation_ratio: 1 — step 0 is on-policy and equals the synchronous step; every later step trains
    on episodes played by the weights one step older (lag 1), played while the previous step trained."""
    full, async_ = runs["full"], runs["async"]
    first = _deterministic(async_["steps"][0])
    assert first.pop("async/lag") == 0.0
    assert first["mismatch/lag_0/mismatch_kl"] == first["mismatch/mismatch_kl"]  # per-lag mismatch metrics
    # the bytes each role was sent differ by design: the async loop calls actor_infer in other batches
    differ = ("async/", "mismatch/lag_", "system/sent_bytes/")
    same = {k: v for k, v in first.items() if not k.startswith(differ)}
    assert same == {k: v for k, v in _deterministic(full["steps"][0]).items() if not k.startswith(differ)}
    for step in range(1, STEPS):
        metrics = async_["steps"][step]
        assert metrics["async/lag"] == 1.0, step
        # its rollout was finished before the previous step's weight sync: the step waited less than it took
        assert metrics["timing/rollout"] < metrics["async/rollout_seconds"], step
        played, expected = _transcripts(runs["root"] / "async", step + 1), _transcripts(runs["root"] / "full", step + 1)
        assert [t["turns"][0]["observation"] for t in played] == [t["turns"][0]["observation"] for t in expected]
    assert "timing/rollout_wait" in async_["steps"][0]
    # the rollout-vs-trainer log-prob mismatch is reported per lag (the off-policy gap the IS correction sees)
    assert all("mismatch/lag_1/mismatch_kl" in async_["steps"][step] for step in range(1, STEPS))


def test_async_rollout_needs_separate_engine_devices(agentic_model, tmp_path):
    from roll.configs import ConfigError

    with pytest.raises(ConfigError, match="actor_infer and actor_train are colocated"):
        agentic_config(agentic_model, tmp_path, ["async_generation_ratio=1", "actor_infer.device_mapping=[0]"])
