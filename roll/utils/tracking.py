"""Metric sinks: TensorBoard, Weights & Biases, SwanLab (`track_with`) and/or the console.

wandb and swanlab default to their offline modes (files under the run directory, no network); a
`tracker_kwargs` mode (e.g. `mode: online`) or any other init argument overrides that.
"""

import os

from roll.utils.logging import get_logger

logger = get_logger("roll.tracking")


class Tracker:
    """TensorBoard writes each run to `<logging_dir>/<run_name>/`, so runs with different `exp_name`s sharing
    one logging_dir show up side by side in `tensorboard --logdir <logging_dir>`."""

    def __init__(self, track_with: str, logging_dir: str, run_name: str, tracker_kwargs: dict | None = None):
        self.writer = None
        self.run = None  # a wandb or swanlab run
        self.run_dir = os.path.join(logging_dir, run_name)
        kwargs = dict(tracker_kwargs or {})
        if track_with == "wandb":
            import wandb

            os.makedirs(self.run_dir, exist_ok=True)
            kwargs.setdefault("mode", "offline")
            self.run = wandb.init(**{"name": run_name, "dir": self.run_dir, "project": "roll", **kwargs})
            logger.info("wandb run (%s): %s", kwargs["mode"], self.run.dir)
        elif track_with == "swanlab":
            import swanlab

            os.makedirs(self.run_dir, exist_ok=True)
            kwargs.setdefault("mode", "offline")
            init = {"experiment_name": run_name, "logdir": self.run_dir, "project": "roll", **kwargs}
            self.run = swanlab.init(**init)
            logger.info("swanlab run (%s) under %s", kwargs["mode"], self.run_dir)
        elif track_with == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self.run_dir = kwargs.pop("log_dir", self.run_dir)  # ROLL's tracker_kwargs.log_dir: the run's own folder
            self.writer = SummaryWriter(log_dir=self.run_dir, **kwargs)
            logger.info("TensorBoard logs: %s (tensorboard --logdir %s)", self.run_dir, os.path.dirname(self.run_dir))

    @classmethod
    def from_config(cls, config) -> "Tracker":
        return cls(config.track_with, config.tensorboard_dir, config.exp_name, config.tracker_kwargs)

    def log(self, metrics: dict, step: int) -> None:
        if self.run is not None:
            self.run.log(dict(metrics), step=step)
        if self.writer is None:
            return
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def histogram(self, key: str, values, step: int) -> None:
        """A distribution per step (e.g. async/lag: each trained sample's policy-version lag)."""
        if self.writer is not None:
            self.writer.add_histogram(key, values, step)

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None
