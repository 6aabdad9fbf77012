"""A run's output directory: one run at a time, no silent mixing with an earlier run's checkpoints, a full disk
during a save named and cleaned up, a corrupted newest checkpoint skipped for the previous complete one.

The saves are real `PipelineCheckpointer.save` calls with stand-in workers that write real files (no Ray), as in
test_checkpoint_crash.py. The full disk is a real 2 MiB tmpfs where root may mount one (CI runs as root);
elsewhere the stand-in worker's write raises OSError(ENOSPC) itself, which is said in the test's output.
"""

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from roll.pipeline.core.checkpointing import STATE_FILE, PipelineCheckpointer
from roll.utils import checkpoint
from tests.pipeline.test_checkpoint_files import _stand_in_pipeline

REPO = Path(__file__).resolve().parents[2]


def claim_output_dirs(config):
    from roll.pipeline.core.output_dir import claim_output_dirs

    return claim_output_dirs(config)


def run_config(output_dir, resume=False, overwrite=False, checkpoint_dir=None):
    return SimpleNamespace(
        output_dir=str(output_dir),
        checkpoint_dir=checkpoint_dir,
        resume_from_checkpoint=resume,
        overwrite_output_dir=overwrite,
    )


def test_a_second_run_into_a_held_output_dir_fails_naming_the_holder(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from types import SimpleNamespace
                from roll.pipeline.core.output_dir import claim_output_dirs
                lock = claim_output_dirs(
                    SimpleNamespace(output_dir={str(tmp_path)!r}, checkpoint_dir=None, resume_from_checkpoint=False)
                )
                print("holding", flush=True)
                time.sleep(120)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(ValueError, match=rf"is in use by another run \(pid {holder.pid} on "):
            claim_output_dirs(run_config(tmp_path))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    claim_output_dirs(run_config(tmp_path)).release()  # the kernel dropped the dead holder's lock
    assert (tmp_path / ".roll.lock").read_text().startswith(f"pid {os.getpid()} on ")


def test_a_checkpoint_dir_of_its_own_is_locked_too(tmp_path):
    lock = claim_output_dirs(run_config(tmp_path / "out", checkpoint_dir=str(tmp_path / "ckpt")))
    with pytest.raises(ValueError, match="'checkpoint_dir' = .* is in use by another run"):
        claim_output_dirs(run_config(tmp_path / "other", checkpoint_dir=str(tmp_path / "ckpt")))
    lock.release()
    claim_output_dirs(run_config(tmp_path / "other", checkpoint_dir=str(tmp_path / "ckpt"))).release()


def _earlier_run(out: Path, steps=(2, 4, 6, 8)) -> Path:
    for step in steps:
        (checkpoint.staging_dir(str(out), step) / STATE_FILE).write_bytes(b"old run")
        checkpoint.commit(str(out), step)
    return checkpoint.checkpoint_root(str(out))


def test_a_fresh_run_never_mixes_with_an_earlier_runs_checkpoints(tmp_path, roll_log):
    root = _earlier_run(tmp_path)
    with pytest.raises(ValueError, match=r"holds checkpoints of an earlier run \(latest, step-2, step-4"):
        claim_output_dirs(run_config(tmp_path))
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-2", "step-4", "step-6", "step-8"]
    claim_output_dirs(run_config(tmp_path, resume=True)).release()  # continuing them is fine
    claim_output_dirs(run_config(tmp_path, overwrite=True)).release()
    assert not root.exists() and "removed the earlier run's checkpoints" in roll_log.getvalue()
    (checkpoint.staging_dir(str(tmp_path), 2) / STATE_FILE).write_bytes(b"new run")
    checkpoint.commit(str(tmp_path), 2)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-2"]  # nothing of the old run is left


@contextmanager
def small_disk(path: Path, size: str = "2m"):
    """A real filesystem of `size` at `path` (tmpfs; needs root), else None."""
    path.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "--lazy", str(path)], check=True)  # torch may still hold the failed file


def test_a_full_disk_during_a_save_is_named_cleaned_up_and_resumable(tmp_path, roll_log):
    out = tmp_path / "disk"
    with small_disk(out) as real:
        if not real:
            warnings.warn(
                "no tmpfs (not root or mount refused): the worker's write raises OSError(ENOSPC) instead", stacklevel=1
            )

        def worker_save(path):  # a trained role's engine state: 1.2 MiB of real torch.save output per step
            Path(path).mkdir(parents=True)
            if not real and Path(path).parent.name == "step-2.tmp":
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(path) / "model.pt"))
            torch.save({"weights": torch.zeros(300_000)}, Path(path) / "model.pt")

        pipeline = _stand_in_pipeline(out, False, {})
        trainer = SimpleNamespace(save_checkpoint=worker_save, load_checkpoint=lambda path: None)
        pipeline.trained_clusters = lambda: {"actor_train": trainer}
        saver = PipelineCheckpointer(pipeline)
        saver.save(completed_steps=1)
        free = shutil.disk_usage(out).free
        with pytest.raises(OSError, match="saving checkpoint step-2 failed: no space left on device under") as e:
            saver.save(completed_steps=2)
        root = checkpoint.checkpoint_root(str(out))
        assert str(root) in str(e.value) and "The partial step-2.tmp was removed" in str(e.value)
        assert f"newest complete checkpoint is {root / 'step-1'}" in str(e.value)
        assert sorted(p.name for p in root.iterdir()) == ["latest", "step-1"]  # no partial save fills the disk
        from roll.utils.errors import UserError

        assert isinstance(e.value, UserError)  # the launcher prints its message alone
        resumed = _stand_in_pipeline(out, True, saved := {})
        assert PipelineCheckpointer(resumed).resume() == 1 and saved  # the previous complete checkpoint loads
        assert shutil.disk_usage(out).free == free  # the space the partial save took is back


def test_a_corrupted_newest_checkpoint_falls_back_to_the_previous_complete_one(tmp_path, roll_log):
    saver = PipelineCheckpointer(_stand_in_pipeline(tmp_path, False, {}))
    for step in (1, 2):
        saver.save(completed_steps=step)
    state = checkpoint.checkpoint_root(str(tmp_path)) / "step-2" / STATE_FILE
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes: only the sha256 sees it
    state.write_bytes(bytes(data))
    resumed = PipelineCheckpointer(_stand_in_pipeline(tmp_path, True, saved := {}))
    resumed.check_resumable()
    assert resumed.resume() == 1 and saved
    logged = roll_log.getvalue()
    assert "ignoring checkpoint" in logged and f"step-2: {STATE_FILE} does not match its sha256" in logged
    assert "resuming from" in logged and "step-1, the newest complete checkpoint" in logged
    with pytest.raises(FileNotFoundError, match="does not match its sha256"):  # named explicitly: refused
        PipelineCheckpointer(_stand_in_pipeline(tmp_path, str(state.parent), {})).check_resumable()
