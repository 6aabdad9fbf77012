"""The SFT loop: each step trains `sft_train` on the next global batch of the training rows, in file order (ROLL's
DataLoader: no shuffling, the last partial batch of an epoch dropped); the validation loss every eval_steps.

The loop, checkpoints (sft_train's engine state and a loadable hf/ copy), resume, recovery and tracking are the
thin pipeline's (roll.pipeline.base); there is no rollout, no reference and no weight sync. The batch a step trains
on is a function of the step alone, so a resumed run continues exactly.

    from roll.pipeline.sft.pipeline import train_sft
    model_dir = train_sft("examples/sft_demo", "sft_tiny", ["output_dir=out/warm"])  # → the final hf/ copy
"""

from pathlib import Path

import numpy as np

from roll.algorithms.loss_tokens import IGNORE_INDEX
from roll.pipeline.base import BasePipeline
from roll.pipeline.core import checkpointing
from roll.pipeline.core.metrics import reduce_over_ranks
from roll.pipeline.sft.data import Columns, collate, load_rows
from roll.utils.errors import InputError
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline")

LOSS, VAL_LOSS = "sft_train/loss@sum", "sft_train/val_loss"  # ROLL's metric names


class SFTPipeline(BasePipeline):
    """`SFTPipeline(config).run()`; see BasePipeline."""

    headline_metrics = (("loss", LOSS), ("val_loss", VAL_LOSS), ("grad_norm", "sft_train/grad_norm"))

    def _setup_data(self) -> None:
        config = self.config
        self.tokenizer.padding_side = "right"  # SFT rows are right padded (ROLL's too)
        columns, template = Columns.of(config), config.sft_train.data_args.chat_template
        self.train_rows = load_rows(
            config.sft_train.data_args, "sft_train.data_args", columns, self.tokenizer, template, config.sequence_length
        )
        self.val_rows = []
        if config.validation is not None:
            self.val_rows = load_rows(
                config.validation.data_args, "validation.data_args", columns, self.tokenizer, template,
                config.sequence_length,
            )  # fmt: skip
        self.global_batch = config.global_batch_size
        self.steps_per_epoch = len(self.train_rows) // self.global_batch
        if self.steps_per_epoch == 0:
            raise InputError(
                f"'sft_train.data_args.file_name' has {len(self.train_rows)} rows, fewer than one global batch of "
                f"{self.global_batch} (data-parallel size × gradient_accumulation_steps × per_device_train_batch_size)"
                ": lower the batch or add rows"
            )
        if config.max_steps is None or getattr(self, "_steps_from_epochs", False):
            self._steps_from_epochs = True  # a recovery re-runs _setup_data: the same count
            config.max_steps, how = config.run_length(len(self.train_rows))
            logger.info("max_steps = %d: %s", config.max_steps, how)

    def batch_rows(self, step: int) -> list:
        """The rows of 0-based `step`: the (step mod steps-per-epoch)-th whole global batch in file order."""
        start = (step % self.steps_per_epoch) * self.global_batch
        return self.train_rows[start : start + self.global_batch]

    def step(self, step: int) -> dict:
        timer = self.new_timer()
        batch = collate(self.batch_rows(step), self.config.sequence_length, self.pad_token_id)
        batch.meta_info["global_step"] = step
        with timer.phase("train"):
            self.memory.use("sft_train")
            self.threads.enter({"sft_train"})
            metrics = reduce_over_ranks(self.sft_train.train_step(batch))
        metrics["sft_train/epoch"] = step // self.steps_per_epoch + 1
        metrics.update(timer.timings)
        return metrics

    def validate(self, step: int) -> dict:
        """sft_train/val_loss: the mean over validation batches (val_batch_size rows; the last may be shorter) of
        each batch's token-mean cross-entropy (ROLL's value)."""
        if not self.val_rows:
            return {}
        size, losses = self.config.val_batch_size, []
        self.memory.use("sft_train")
        self.threads.enter({"sft_train"})
        for start in range(0, len(self.val_rows), size):
            batch = collate(self.val_rows[start : start + size], self.config.sequence_length, self.pad_token_id)
            padded, _ = batch.pad_to_multiple(self.sft_train.world_size)  # copies' results are dropped
            log_probs = self.sft_train.val_step(padded).batch["label_log_probs"][: len(batch)]
            tokens = int((batch.batch["labels"] != IGNORE_INDEX).sum())
            losses.append(-float(log_probs.double().sum()) / max(tokens, 1))
        return {VAL_LOSS: float(np.mean(losses))}


def run_pipeline(config) -> dict:
    """Entry point used by examples/start_sft_pipeline.py: runs the config, prints the loss before → after."""
    with SFTPipeline(config) as pipeline:
        history = pipeline.run()
    print(summary(history), flush=True)
    return history


def summary(history: dict) -> str:
    """One line: the training loss of the first and last steps run, and the validation loss before → after."""
    steps = [history["steps"][s] for s in sorted(history["steps"])]
    parts = []
    if steps:
        parts.append(f"training loss {steps[0][LOSS]:.3f} (first step) -> {steps[-1][LOSS]:.3f} (last step)")
    validations = [m[VAL_LOSS] for m in [history.get("before") or {}, *steps] if VAL_LOSS in m]
    if validations:
        parts.append(f"validation loss {validations[0]:.3f} -> {validations[-1]:.3f}")
    return "SFT: " + ("; ".join(parts) or "no step run")


def final_model_dir(config) -> Path:
    """The loadable HF copy (weights + tokenizer) of sft_train after the run's last step: its checkpoint's hf/."""
    return checkpointing.final_model_dir(config, "sft_train")


def train_sft(config_path: str, config_name: str, overrides=()) -> Path:
    """Run an SFT config (a YAML folder and name, Hydra overrides) to its end and return the directory of the
    fine-tuned model (a plain HF folder, LoRA merged), e.g. for another pipeline's warm start. The config must
    save its last step (save_steps > 0; a save_steps beyond max_steps saves the last step only)."""
    from roll.configs import compose_config, load_config
    from roll.pipeline.sft.config import SFTConfig

    config = load_config(SFTConfig, compose_config(config_path, config_name, list(overrides)))
    if not config.save_steps:
        raise InputError(f"{config_path}/{config_name}.yaml: save_steps is 0, so no model would be written")
    run_pipeline(config)
    return final_model_dir(config)
