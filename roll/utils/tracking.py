"""Metric sinks: TensorBoard (`track_with: tensorboard`) and/or the console."""

from roll.utils.logging import get_logger

logger = get_logger("roll.tracking")


class Tracker:
    def __init__(self, track_with: str, logging_dir: str):
        self.writer = None
        if track_with == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=logging_dir)
            logger.info("TensorBoard logs: %s (tensorboard --logdir %s)", logging_dir, logging_dir)

    def log(self, metrics: dict, step: int) -> None:
        if self.writer is None:
            return
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
