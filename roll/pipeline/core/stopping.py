"""Stopping a run on SIGTERM (what a cluster scheduler sends on preemption) or Ctrl-C (SIGINT), at a safe point.

The first signal during training is recorded and the current step finishes; at the end of it the run writes a
checkpoint of the completed steps (unless `checkpoint_on_stop: false`, or the step's own save wrote it already)
and raises `StopRequested`. The launcher (roll.cli) then stops Ray — every worker the run started — prints one
line (where it stopped, the checkpoint, the command that resumes) and exits 130 (SIGINT) or 143 (SIGTERM), the
shell's 128 + signal number. A second signal raises `StopRequested` at once, wherever the run is (a save it
interrupts stays `step-N.tmp`, which a resume ignores), and the launcher stops Ray the same way. Outside the
step loop (start-up, validation before it starts is inside) the first signal already stops at once: there is
nothing to save.

A stop is a BaseException, like KeyboardInterrupt, so that no `except Exception` on the way swallows it.
"""

import contextlib
import signal
import threading

from roll.utils import checkpoint
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code(signum: int) -> int:
    """The shell's status for a process ended by `signum` (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signum)


class StopRequested(BaseException):
    """The run stopped on a signal. `signum`: the first signal; `at_once`: stopped where it was (a second
    signal, or start-up) rather than after a step; `completed_steps`/`max_steps`: how far it got (None: before
    the step loop); `checkpoint`: the newest complete checkpoint (written by the stop or earlier), or None."""

    def __init__(self, signum: int, at_once: bool, completed_steps=None, max_steps=None, checkpoint=None):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum, self.at_once = signum, at_once
        self.completed_steps, self.max_steps, self.checkpoint = completed_steps, max_steps, checkpoint

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)

    def line(self, rerun: str, resume: str) -> str:
        """The one line the launcher prints: where the run stopped, its checkpoint and the command to go on."""
        name = signal.Signals(self.signum).name
        if self.completed_steps is None:
            return f"stopped by {name} during start-up, before any step: nothing was trained; to start again: {rerun}"
        how = "at once (a second signal)" if self.at_once else "at a safe point"
        done = f"{self.completed_steps} of {self.max_steps} steps done"
        if self.checkpoint is None:
            return f"stopped by {name} {how}, {done}; no checkpoint to resume from; to start again: {rerun}"
        return f"stopped by {name} {how}, {done}; checkpoint: {self.checkpoint}; to resume: {resume}"


class Stopper:
    """The process's SIGINT/SIGTERM handling (one per process: `STOPPER`). Installed by the launcher for the whole
    run, and by `BasePipeline.run` around its step loop (where it then defers the first signal to the end of the
    step). Only the main thread can install signal handlers; elsewhere nothing changes."""

    def __init__(self):
        self.signum: int | None = None  # the first signal received
        self.deferring = False  # inside the step loop: the first signal waits for the end of the step
        self.finishing = False  # the stop is being carried out: further signals change nothing
        self.progress: tuple | None = None  # (completed steps, max_steps, checkpoint base) of the running loop
        self._previous: dict | None = None

    def installed(self) -> bool:
        return self._previous is not None

    def install(self) -> bool:
        """Take SIGINT and SIGTERM; returns whether it did (False: not the main thread, or installed already)."""
        if self.installed() or threading.current_thread() is not threading.main_thread():
            return False
        self.signum, self.finishing, self.progress = None, False, None
        self._previous = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}
        return True

    def uninstall(self) -> None:
        if self._previous is None:
            return
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = None

    def reinstall(self) -> None:
        """Take the signals back where a library replaced the handlers (ray.init sets one for SIGTERM)."""
        if self.installed() and threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                if signal.getsignal(signum) is not self._handle:
                    signal.signal(signum, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.finishing:
            return
        if self.signum is None and self.deferring:
            self.signum = signum
            done = f" ({self.progress[0]} of {self.progress[1]} steps done)" if self.progress else ""
            logger.warning(
                "%s received%s: stopping at the end of the current step, after a checkpoint; send it again to stop "
                "at once",
                signal.Signals(signum).name,
                done,
            )
            return
        first = self.signum or signum
        self.signum, self.finishing = first, True
        raise self.stop_at_once()

    def stop_at_once(self) -> StopRequested:
        """The StopRequested of a stop where the run is (a second signal, or outside the step loop)."""
        if self.progress is None:
            return StopRequested(self.signum, True)
        completed, max_steps, base = self.progress
        return StopRequested(self.signum, True, completed, max_steps, newest_checkpoint(base))

    @contextlib.contextmanager
    def safe_points(self):
        """Within: the first signal is deferred to the next `stop_point`."""
        installed_here = self.install()
        self.reinstall()
        self.deferring = self.installed()
        try:
            yield
        finally:
            self.deferring = False
            if installed_here:
                self.uninstall()


STOPPER = Stopper()


def newest_checkpoint(base: str | None):
    if base is None:
        return None
    try:
        return checkpoint.find_checkpoint(base, True)
    except Exception:  # a stop reports what it can; a broken checkpoint directory is for the resume to name
        return None


def stop_point(pipeline, completed_steps: int) -> None:
    """Between steps (`completed_steps` done): if a signal asked the run to stop, write the checkpoint (unless it
    exists, the pipeline saves none, or `checkpoint_on_stop` is false) and raise StopRequested."""
    config = pipeline.config
    base = _checkpoint_base(pipeline)
    STOPPER.progress = (completed_steps, config.max_steps, base)
    if STOPPER.signum is None or completed_steps >= config.max_steps:
        return  # a signal during the last step: the run is complete anyway
    newest = newest_checkpoint(base)
    saved_now = newest is not None and newest == checkpoint.checkpoint_root(base) / f"step-{completed_steps}"
    if base is not None and completed_steps > 0 and getattr(config, "checkpoint_on_stop", True) and not saved_now:
        pipeline.checkpointer.save(completed_steps=completed_steps)  # atomic: step-N.tmp, manifest, rename
        newest = newest_checkpoint(base)
    STOPPER.finishing = True  # from here on the launcher only stops Ray: further signals change nothing
    raise StopRequested(STOPPER.signum, False, completed_steps, config.max_steps, newest)


def _checkpoint_base(pipeline) -> str | None:
    from roll.pipeline.core.checkpointing import checkpoint_base

    return checkpoint_base(pipeline.config) if pipeline.saves_checkpoints else None
