"""The stop logic of roll.pipeline.core.stopping with real signals sent to this process, against a test double of a
pipeline (the real run, its checkpoint, resume and process table: tests/pipeline/test_stop_signals.py): inside the
step loop the first signal is deferred to the end of the step, which writes a checkpoint (or, with
checkpoint_on_stop false or a checkpoint of that step already saved, none) and stops; a second signal stops at
once; outside the loop the first one does. And the launcher's one line and resume command."""

import os
import signal
import sys
from types import SimpleNamespace

import pytest

from roll.cli import _command
from roll.pipeline.core.stopping import STOPPER, StopRequested, stop_point
from roll.utils import checkpoint


class FakePipeline:
    """What stop_point uses of a pipeline: config, saves_checkpoints, checkpointer.save (a real checkpoint commit)."""

    saves_checkpoints = True

    def __init__(self, out, **config):
        self.config = SimpleNamespace(output_dir=str(out), checkpoint_dir=None, max_steps=10, **config)
        self.saved = []
        self.checkpointer = SimpleNamespace(save=self.save)

    def save(self, completed_steps):
        staged = checkpoint.staging_dir(self.config.output_dir, completed_steps)
        (staged / "pipeline_state.pt").write_bytes(b"state")
        checkpoint.commit(self.config.output_dir, completed_steps)
        self.saved.append(completed_steps)


@pytest.fixture
def stopper():
    assert STOPPER.install(), "pytest runs tests on the main thread"
    yield STOPPER
    STOPPER.uninstall()
    STOPPER.signum, STOPPER.finishing, STOPPER.deferring, STOPPER.progress = None, False, False, None


def test_a_signal_in_the_loop_waits_for_the_step_then_saves_and_stops(stopper, tmp_path):
    pipeline = FakePipeline(tmp_path, checkpoint_on_stop=True)
    with stopper.safe_points():
        stop_point(pipeline, 3)  # nothing asked: the loop goes on
        os.kill(os.getpid(), signal.SIGTERM)  # "during step 4": recorded, nothing raised
        assert stopper.signum == signal.SIGTERM
        with pytest.raises(StopRequested) as caught:
            stop_point(pipeline, 4)
    stop = caught.value
    assert (stop.signum, stop.at_once, stop.completed_steps, stop.exit_code) == (signal.SIGTERM, False, 4, 143)
    assert pipeline.saved == [4] and stop.checkpoint == tmp_path / "checkpoints" / "step-4"
    checkpoint.verify(stop.checkpoint)
    line = stop.line("python run.py a=1", "python run.py a=1 resume_from_checkpoint=true")
    assert line == (
        f"stopped by SIGTERM at a safe point, 4 of 10 steps done; checkpoint: {tmp_path}/checkpoints/step-4; "
        "to resume: python run.py a=1 resume_from_checkpoint=true"
    )


def test_no_second_save_of_a_saved_step_and_none_without_checkpoint_on_stop(stopper, tmp_path):
    pipeline = FakePipeline(tmp_path, checkpoint_on_stop=True)
    pipeline.save(2)  # save_steps wrote step 2 already
    with stopper.safe_points():
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(StopRequested) as caught:
            stop_point(pipeline, 2)
    assert pipeline.saved == [2] and caught.value.checkpoint.name == "step-2" and caught.value.exit_code == 130
    STOPPER.signum, STOPPER.finishing = None, False
    skipping = FakePipeline(tmp_path, checkpoint_on_stop=False)
    with stopper.safe_points():
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(StopRequested) as caught:
            stop_point(skipping, 3)
    assert skipping.saved == [] and caught.value.checkpoint.name == "step-2"  # the newest there is


def test_a_second_signal_stops_at_once(stopper, tmp_path):
    pipeline = FakePipeline(tmp_path, checkpoint_on_stop=True)
    with stopper.safe_points():
        stop_point(pipeline, 1)
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(StopRequested) as caught:
            os.kill(os.getpid(), signal.SIGTERM)  # raised here, mid-step
    stop = caught.value
    assert (stop.signum, stop.at_once, stop.completed_steps, stop.checkpoint) == (signal.SIGINT, True, 1, None)
    assert stop.line("again", "resume") == (
        "stopped by SIGINT at once (a second signal), 1 of 10 steps done; no checkpoint to resume from; to start "
        "again: again"
    )
    os.kill(os.getpid(), signal.SIGINT)  # the stop is under way: a third signal changes nothing


def test_outside_the_loop_the_first_signal_stops_at_once(stopper):
    with pytest.raises(StopRequested) as caught:
        os.kill(os.getpid(), signal.SIGINT)
    assert caught.value.completed_steps is None and caught.value.exit_code == 130
    assert caught.value.line("python run.py", "-").startswith(
        "stopped by SIGINT during start-up, before any step: nothing was trained; to start again: python run.py"
    )


def test_the_resume_command_is_this_one_with_resume_from_checkpoint_true(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["examples/start_rlvr_pipeline.py"])
    argv = ["--config_path", "my dir", "max_steps=5", "--dry_run", "++resume_from_checkpoint=false"]
    assert _command(argv, resume=True) == (
        f"{sys.executable} examples/start_rlvr_pipeline.py --config_path 'my dir' max_steps=5 "
        "resume_from_checkpoint=true"
    )
    assert _command(argv) == (
        f"{sys.executable} examples/start_rlvr_pipeline.py --config_path 'my dir' max_steps=5 "
        "++resume_from_checkpoint=false"
    )
