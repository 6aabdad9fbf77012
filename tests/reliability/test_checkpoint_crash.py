"""A checkpoint cannot be half-written: a process SIGKILLed at any point of a save leaves the previous
checkpoint loadable, and resume ignores the partial one with a log line. `max_ckpt_to_keep` removes old
checkpoints only once the new one is complete.

Each case runs a real `PipelineCheckpointer.save` in a subprocess (stand-in workers that write files, no
Ray), which kills itself with SIGKILL at the chosen point.
"""

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from roll.pipeline.core.checkpointing import PipelineCheckpointer
from roll.utils import checkpoint
from tests.pipeline.test_checkpoint_files import _stand_in_pipeline

# The child: saves step 1 completely, then starts saving step 2 and SIGKILLs itself at KILL_AT.
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from types import SimpleNamespace
    import numpy as np
    from roll.pipeline.core.checkpointing import PipelineCheckpointer
    from roll.utils import checkpoint

    out, kill_at, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
    saving = {"step": 0}

    def die(point):
        if saving["step"] == 2 and point == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def worker_save(path):  # a trained role's engine state: two shards, killed between them
        Path(path).mkdir(parents=True)
        (Path(path) / "shard0.bin").write_bytes(os.urandom(4096))
        die("worker_save")
        (Path(path) / "shard1.bin").write_bytes(os.urandom(4096))

    for name in ("_fsync_tree", "write_manifest", "_point_latest", "prune"):
        def wrap(fn, name=name):
            def hooked(*args, **kwargs):
                die(name)
                return fn(*args, **kwargs)
            return hooked
        setattr(checkpoint, name, wrap(getattr(checkpoint, name)))

    pipeline = SimpleNamespace(
        config=SimpleNamespace(
            output_dir=out, checkpoint_dir=None, resume_from_checkpoint=False, max_steps=4, max_ckpt_to_keep=keep,
            fingerprint=lambda: {"seed": 1},
        ),
        trained_clusters=lambda: {"actor_train": SimpleNamespace(save_checkpoint=worker_save)},
        memory=SimpleNamespace(use=lambda *names: None), data_state=lambda: {},
        components_state=lambda: {
            "kl_coef": float(np.float64(0.1)),
            "old_log_probs": {"setting": None, "blockers": [], "measured": 2e-7},
        },
    )
    for step in (1, 2):
        saving["step"] = step
        PipelineCheckpointer(pipeline).save(completed_steps=step)
    """
)

# where the save is cut: in a worker's write, before the manifest, before the fsync/rename, before `latest`
# moves, and while old checkpoints are removed (max_ckpt_to_keep=1)
KILL_POINTS = ["worker_save", "write_manifest", "_fsync_tree", "_point_latest", "prune"]


def _save_and_kill(out, kill_at: str, keep: int = 0):
    child = subprocess.run([sys.executable, "-c", CHILD, str(out), kill_at, str(keep)], capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL, child.stderr


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_a_save_killed_midway_leaves_the_previous_checkpoint_loadable(tmp_path, kill_at, roll_log):
    keep = 1 if kill_at == "prune" else 0
    _save_and_kill(tmp_path, kill_at, keep)
    root = checkpoint.checkpoint_root(str(tmp_path))
    found = checkpoint.find_checkpoint(str(tmp_path), True)
    logged = roll_log.getvalue()
    if kill_at == "_point_latest":  # step-2 is in place and complete, but `latest` still names step-1
        checkpoint.verify(root / "step-2")
        assert found.name == "step-1"
        checkpoint.verify(found)
        return
    if kill_at == "prune":  # step-2 is committed; step-1, not yet removed, is still complete
        assert found.name == "step-2"
        checkpoint.verify(found)
        checkpoint.verify(root / "step-1")
        return
    assert found.name == "step-1", sorted(p.name for p in root.iterdir())
    checkpoint.verify(found)  # sizes and sha256 of every file
    assert "ignoring unfinished checkpoint" in logged and "step-2.tmp" in logged
    saved = {}
    resumed = _stand_in_pipeline(tmp_path, True, saved)
    assert PipelineCheckpointer(resumed).resume() == 1  # the previous checkpoint loads


def test_a_step_directory_whose_files_changed_is_skipped_for_the_previous_one(tmp_path, roll_log):
    for step in (1, 2):
        staged = checkpoint.staging_dir(str(tmp_path), step)
        (staged / "shard.bin").write_bytes(b"x" * 100)
        checkpoint.commit(str(tmp_path), step)
    step2 = checkpoint.checkpoint_root(str(tmp_path)) / "step-2"
    (step2 / "shard.bin").write_bytes(b"x" * 50)  # truncated after the fact
    assert checkpoint.find_checkpoint(str(tmp_path), True).name == "step-1"
    logged = roll_log.getvalue()
    assert "ignoring checkpoint" in logged and "shard.bin has 50 bytes, MANIFEST.json says 100" in logged
    (step2 / "shard.bin").write_bytes(b"y" * 100)  # same size, different bytes: caught by the full check on load
    with pytest.raises(checkpoint.IncompleteCheckpoint, match="does not match its sha256"):
        checkpoint.verify(step2)
    with pytest.raises(FileNotFoundError, match="does not match its sha256"):
        PipelineCheckpointer(_stand_in_pipeline(tmp_path, str(step2), {})).resume()
    (step2 / checkpoint.MANIFEST).unlink()
    with pytest.raises(FileNotFoundError, match="has no MANIFEST.json: its save did not finish"):
        checkpoint.find_checkpoint(str(tmp_path), str(step2))


def test_max_ckpt_to_keep_removes_old_checkpoints_only_after_the_new_one_is_complete(tmp_path):
    out = str(tmp_path)
    root = checkpoint.checkpoint_root(out)
    for step in (1, 2, 3):
        (checkpoint.staging_dir(out, step) / "a.txt").write_text(str(step))
        checkpoint.commit(out, step, max_to_keep=2)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-2", "step-3"]
    manifest = json.loads((root / "step-3" / checkpoint.MANIFEST).read_text())
    assert manifest["files"]["a.txt"]["size"] == 1 and len(manifest["files"]["a.txt"]["sha256"]) == 64
    # a save killed before its commit removes nothing
    _save_and_kill(tmp_path / "killed", "_fsync_tree", keep=1)
    assert sorted(p.name for p in checkpoint.checkpoint_root(str(tmp_path / "killed")).iterdir()) == [
        "latest",
        "step-1",
        "step-2.tmp",
    ]
    # 0 keeps every checkpoint
    for step in (4, 5):
        (checkpoint.staging_dir(out, step) / "a.txt").write_text(str(step))
        checkpoint.commit(out, step, max_to_keep=0)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-2", "step-3", "step-4", "step-5"]
