"""The DPO loop: each step scores the next global batch of pairs with `reference`, then trains `actor_train` one
optimizer step on the DPO loss; the held-out pairs' DPO metrics every eval_steps.

Pair order: each epoch is a permutation of the training pairs seeded by (seed, epoch) (ROLL's DataLoader
shuffles, drop_last), so the batch a step trains on is a function of the step alone and a resumed run continues
exactly. The loop, checkpoints (actor_train's engine state and a loadable hf/ copy), resume, recovery and tracking
are the thin pipeline's (roll.pipeline.base); there is no rollout, no weight sync and no KL controller.
"""

from pathlib import Path

import numpy as np
import torch

from roll.algorithms.dpo import dpo_loss, dpo_metrics
from roll.pipeline.base import BasePipeline
from roll.pipeline.core import checkpointing
from roll.pipeline.dpo.data import Columns, collate, load_pairs
from roll.pipeline.dpo.worker import pair_log_probs
from roll.utils.errors import InputError
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline")

# ROLL's metric names (plus margins); validation's are the same under val/
LOSS, ACC, MARGINS = "actor/loss", "actor/acc", "actor/margins"
# the policy's own ranking of a pair (log π(chosen) > log π(rejected)), without the reference: not ROLL's, but the
# one preference measure that is not 0 by construction before training (the implicit rewards are 0 there)
LOGP_ACC = "actor/logp_acc"


def mean_over_ranks(per_rank) -> dict:
    """Every metric's mean over the data-parallel ranks (ROLL reduces these DPO metrics by the mean)."""
    per_rank = per_rank if isinstance(per_rank, list) else [per_rank]
    return {key: float(np.mean([metrics[key] for metrics in per_rank])) for key in per_rank[0]}


class DPOPipeline(BasePipeline):
    """`DPOPipeline(config).run()`; see BasePipeline."""

    def _setup_data(self) -> None:
        config = self.config
        columns, template = Columns.of(config), config.actor_train.data_args.chat_template
        self.train_pairs = load_pairs(
            config.actor_train.data_args, "actor_train.data_args", columns, self.tokenizer, template,
            config.sequence_length,
        )  # fmt: skip
        self.val_pairs = []
        if config.validation is not None:
            self.val_pairs = load_pairs(
                config.validation.data_args, "validation.data_args", columns, self.tokenizer, template,
                config.sequence_length,
            )  # fmt: skip
        self.global_pairs = config.global_pairs
        self.steps_per_epoch = len(self.train_pairs) // self.global_pairs
        if self.steps_per_epoch == 0:
            raise InputError(
                f"'actor_train.data_args.file_name' has {len(self.train_pairs)} pairs (that fit sequence_length), "
                f"fewer than one global batch of {self.global_pairs} (data-parallel size × gradient_accumulation_steps"
                " × per_device_train_batch_size): lower the batch or add pairs"
            )
        if config.max_steps is None or getattr(self, "_counted_max_steps", None) == config.max_steps:
            config.max_steps, how = config.run_length(len(self.train_pairs))  # a recovery counts it again
            self._counted_max_steps = config.max_steps
            logger.info("max_steps = %d: %s", config.max_steps, how)
        self._reference_val = None  # the frozen reference's held-out log-prob sums, computed once

    def loss_settings(self) -> dict:
        """ROLL's meta_info keys of the loss, with the configured values (ROLL never sets them: its quirk Q1)."""
        return {"ipo": self.config.ipo, "beta": self.config.beta, "label_smoothing": self.config.label_smoothing}

    def batch_pairs(self, step: int) -> list:
        """The pairs of 0-based `step`: the (step mod steps-per-epoch)-th global batch of its epoch's permutation."""
        epoch, index = divmod(step, self.steps_per_epoch)
        order = np.random.default_rng([self.config.seed, epoch]).permutation(len(self.train_pairs))
        return [self.train_pairs[i] for i in order[index * self.global_pairs : (index + 1) * self.global_pairs]]

    def _batch(self, pairs: list):
        batch = collate(pairs, self.config.sequence_length, self.pad_token_id)
        batch.meta_info.update(self.loss_settings())
        return batch

    def _log_probs(self, role: str, batch) -> torch.Tensor:
        """`role`'s per-token log-probs of `batch` (padded with copies to a multiple of its ranks, then cut)."""
        self.memory.use(role)
        self.threads.enter({role})
        cluster = self.clusters[role]
        padded, _ = batch.pad_to_multiple(cluster.world_size)
        return cluster.compute_log_probs(padded).batch["log_probs"][: len(batch)]

    def step(self, step: int) -> dict:
        timer = self.new_timer()
        batch = self._batch(self.batch_pairs(step))
        batch.meta_info["global_step"] = step
        with timer.phase("reference_log_probs"):
            batch.batch["reference_log_probs"] = self._log_probs("reference", batch)
        with timer.phase("train"):
            self.memory.use("actor_train")
            self.threads.enter({"actor_train"})
            metrics = mean_over_ranks(self.actor_train.train_step(batch))
        metrics["actor/epoch"] = step // self.steps_per_epoch + 1
        logger.info(
            "DPO step %d: loss %.4f, reward accuracy %.3f, margin %.3f, grad_norm %.3f",
            step + 1, metrics[LOSS], metrics[ACC], metrics[MARGINS], metrics["actor_train/grad_norm"],
        )  # fmt: skip
        metrics.update(timer.timings)
        return metrics

    def _sequence_sums(self, role: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(chosen, rejected) log-prob sums of every held-out pair under `role`, in validation batches."""
        chosen, rejected = [], []
        size = self.config.val_pairs
        for start in range(0, len(self.val_pairs), size):
            batch = self._batch(self.val_pairs[start : start + size])
            c, r = pair_log_probs(self._log_probs(role, batch), batch.batch)
            chosen.append(c)
            rejected.append(r)
        return torch.cat(chosen), torch.cat(rejected)

    def validate(self, step: int) -> dict:
        """val/actor/*: the DPO metrics over EVERY held-out pair with the configured loss (ROLL reports the last
        validation batch only, with the default settings: its quirks Q1, Q2), plus val/actor/logp_acc."""
        if not self.val_pairs:
            return {}
        if self._reference_val is None:
            self._reference_val = self._sequence_sums("reference")
        policy_chosen, policy_rejected = self._sequence_sums("actor_train")
        loss, chosen_rewards, rejected_rewards = dpo_loss(
            policy_chosen, policy_rejected, *self._reference_val, **self.loss_settings()
        )
        metrics = dpo_metrics(loss, chosen_rewards, rejected_rewards, prefix="actor")
        metrics[LOGP_ACC] = (policy_chosen > policy_rejected).float().mean().item()
        return {f"val/{key}": value for key, value in metrics.items()}


def run_pipeline(config) -> dict:
    """Entry point used by examples/start_dpo_pipeline.py: runs the config, prints its effect."""
    with DPOPipeline(config) as pipeline:
        history = pipeline.run()
    print(summary(history), flush=True)
    return history


def summary(history: dict) -> str:
    """One line: the training loss of the first and last steps, the held-out metrics before → after."""
    steps = [history["steps"][s] for s in sorted(history["steps"])]
    parts = []
    if steps:
        parts.append(f"training loss {steps[0][LOSS]:.3f} (first step) -> {steps[-1][LOSS]:.3f} (last step)")
    validations = [m for m in [history.get("before") or {}, *steps] if f"val/{LOSS}" in m]
    if validations:
        first, last = validations[0], validations[-1]
        for label, key, scale in (
            ("held-out loss", LOSS, 1),
            ("held-out reward accuracy", ACC, 100),
            ("held-out reward margin", MARGINS, 1),
            ("held-out pairs the policy ranks right", LOGP_ACC, 100),
        ):
            unit = "%" if scale == 100 else ""
            parts.append(f"{label} {scale * first[f'val/{key}']:.3g}{unit} -> {scale * last[f'val/{key}']:.3g}{unit}")
    return "DPO: " + ("; ".join(parts) or "no step run")


def final_model_dir(config) -> Path:
    """The loadable HF copy (weights + tokenizer) of actor_train after the run's last step: its checkpoint's hf/."""
    return checkpointing.final_model_dir(config, "actor_train")
