"""Metric sinks: TensorBoard (`track_with: tensorboard`) and/or the console."""

import os

from roll.utils.logging import get_logger

logger = get_logger("roll.tracking")


class Tracker:
    """TensorBoard writes each run to `<logging_dir>/<run_name>/`, so runs with different `exp_name`s sharing
    one logging_dir show up side by side in `tensorboard --logdir <logging_dir>`."""

    def __init__(self, track_with: str, logging_dir: str, run_name: str):
        self.writer = None
        self.run_dir = os.path.join(logging_dir, run_name)
        if track_with == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=self.run_dir)
            logger.info("TensorBoard logs: %s (tensorboard --logdir %s)", self.run_dir, logging_dir)

    @classmethod
    def from_config(cls, config) -> "Tracker":
        return cls(config.track_with, config.tensorboard_dir, config.exp_name)

    def log(self, metrics: dict, step: int) -> None:
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
        if self.writer is not None:
            self.writer.close()
            self.writer = None
