"""The offline distillation loop (ROLL's DistillPipeline.run): each step takes the next global batch of the
training rows (shuffled once per epoch with the run's seed, the last partial batch dropped: ROLL's DataLoader), the
teacher scores it (its top-k per position), the teacher's tensors join the batch on the driver (they travel through
Ray's object store) and the student trains one optimizer step on it; the validation loss every eval_steps.

The loop, checkpoints (the student's engine state and a loadable hf/ copy), resume, recovery and tracking are the
thin pipeline's (roll.pipeline.base). The rows of a step are a function of the seed and the step alone, so a resumed
run continues exactly.
"""

import random
from pathlib import Path

from roll.algorithms.loss_tokens import IGNORE_INDEX
from roll.pipeline.base import BasePipeline
from roll.pipeline.core import checkpointing
from roll.pipeline.core.metrics import reduce_over_ranks
from roll.pipeline.distill.data import collate, load_rows
from roll.utils.errors import InputError
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline")

LOSS, DISTILL, STUDENT = "train/loss@sum", "train/train_distill_loss@sum", "train/train_student_loss@sum"
VAL_LOSS = "student/val_loss"


class DistillPipeline(BasePipeline):
    """`DistillPipeline(config).run()`; see BasePipeline."""

    headline_metrics = (("loss", LOSS), ("distill", DISTILL), ("ce", STUDENT), ("val_loss", VAL_LOSS))

    def _setup_data(self) -> None:
        config = self.config
        self.tokenizer.padding_side = "right"  # ROLL's distillation rows are right padded
        template = config.student.data_args.chat_template
        self.train_rows = load_rows(config.student.data_args, "student.data_args", config, self.tokenizer, template)
        self.val_rows = []
        if config.validation is not None:
            self.val_rows = load_rows(
                config.validation.data_args, "validation.data_args", config, self.tokenizer, template
            )
        self.global_batch = config.global_batch_size
        self.steps_per_epoch = len(self.train_rows) // self.global_batch
        if self.steps_per_epoch == 0:
            raise InputError(
                f"'student.data_args.file_name' has {len(self.train_rows)} rows, fewer than one global batch of "
                f"{self.global_batch} (data-parallel size × gradient_accumulation_steps × per_device_train_batch_size)"
            )
        if config.max_steps is None or getattr(self, "_steps_from_epochs", False):
            self._steps_from_epochs = True  # a recovery re-runs _setup_data: the same count
            config.max_steps, how = config.run_length(len(self.train_rows))
            logger.info("max_steps = %d: %s", config.max_steps, how)
        # ROLL's target_vocab_size: the tokenizer's vocab_size (added special tokens excluded, as ROLL)
        self.distill_settings = {
            "logits_topk": config.logits_topk,
            "target_vocab_size": self.tokenizer.vocab_size,
            "kd_temperature": config.kd_temperature,
            "teacher_temperature": config.teacher_temperature,
            "kd_objective": config.kd_objective,
            "distill_loss_weight": config.distill_loss_weight,
            "adaptive_kl_alpha": config.adaptive_kl_alpha,
            "skew_lambda": config.skew_lambda,
        }

    def batch_rows(self, step: int) -> list:
        """The rows of 0-based `step`: its whole global batch of its epoch's order (seeded by the run's seed and the
        epoch)."""
        epoch, index = divmod(step, self.steps_per_epoch)
        order = list(range(len(self.train_rows)))
        random.Random(f"{self.config.seed}-{epoch}").shuffle(order)
        picked = order[index * self.global_batch : (index + 1) * self.global_batch]
        return [self.train_rows[i] for i in picked]

    def _teacher_forward(self, batch):
        """The teacher's tensors of `batch`'s rows (padded to a multiple of its ranks; the copies are dropped)."""
        padded, _ = batch.pad_to_multiple(self.teacher.world_size)
        padded.meta_info["distill"] = self.distill_settings
        out = self.teacher.forward(padded)
        return {key: value[: len(batch)] for key, value in out.batch.items()}

    def step(self, step: int) -> dict:
        timer = self.new_timer()
        batch = collate(self.batch_rows(step))
        batch.meta_info.update(global_step=step, distill=self.distill_settings)
        with timer.phase("teacher_forward"):
            self.memory.use("teacher")
            self.threads.enter({"teacher"})
            batch.batch.update(self._teacher_forward(batch))
        with timer.phase("train"):
            self.memory.use("student")
            self.threads.enter({"student"})
            metrics = reduce_over_ranks(self.student.train_step(batch))
        metrics["student/epoch"] = step // self.steps_per_epoch + 1
        metrics.update(timer.timings)
        return metrics

    def validate(self, step: int) -> dict:
        """student/val_loss: the token-mean cross-entropy of the student over every validation label token
        (ROLL's validation cannot run; this is its evident intent)."""
        if not self.val_rows:
            return {}
        self.memory.use("student")
        self.threads.enter({"student"})
        size = self.config.student.infer_batch_size * self.student.world_size
        total, tokens = 0.0, 0
        for start in range(0, len(self.val_rows), size):
            batch = collate(self.val_rows[start : start + size])
            padded, _ = batch.pad_to_multiple(self.student.world_size)  # the copies' results are dropped
            log_probs = self.student.val_step(padded).batch["label_log_probs"][: len(batch)]
            total -= float(log_probs.double().sum())
            tokens += int((batch.batch["labels_for_loss"][:, 1:] != IGNORE_INDEX).sum())
        return {VAL_LOSS: total / max(tokens, 1)}


def run_pipeline(config) -> dict:
    """Entry point of examples/start_distill_pipeline.py: runs the config and prints the losses first → last."""
    with DistillPipeline(config) as pipeline:
        history = pipeline.run()
    print(summary(history), flush=True)
    return history


def summary(history: dict) -> str:
    """One line: the training losses of the first and last steps run, and the validation loss before → after."""
    steps = [history["steps"][s] for s in sorted(history["steps"])]
    parts = []
    if steps:
        first, last = steps[0], steps[-1]
        parts.append(
            f"training loss {first[LOSS]:.3f} -> {last[LOSS]:.3f} (divergence {first[DISTILL]:.3f} -> "
            f"{last[DISTILL]:.3f}, cross-entropy {first[STUDENT]:.3f} -> {last[STUDENT]:.3f}), first -> last step"
        )
    validations = [m[VAL_LOSS] for m in [history.get("before") or {}, *steps] if VAL_LOSS in m]
    if validations:
        parts.append(f"validation loss {validations[0]:.3f} -> {validations[-1]:.3f}")
    return "distillation: " + ("; ".join(parts) or "no step run")


def final_model_dir(config) -> Path:
    """The loadable HF copy of the student after the run's last step: its checkpoint's hf/."""
    return checkpointing.final_model_dir(config, "student")
