"""The two workers of offline distillation (ROLL's TeacherWorker and StudentWorker).

TeacherWorker.forward: the teacher's top-k per position (roll.algorithms.distill.teacher_topk) of this rank's rows,
through the strategy's scoring forward (so every scoring engine serves it, Megatron's vocabulary-parallel logits
included), in micro-batches of teacher.training_args.per_device_train_batch_size (ROLL's teacher micro-batch).
Position t holds the distribution over token t + 1; the last position, which predicts nothing, is filled with a
uniform entry that no label selects.

StudentWorker.train_step: one optimizer step of roll.algorithms.distill.distill_loss; each micro-batch returns
(its sum / the global label count N) × loss_scale (the strategy's loss_mask_keys contract), so the step's gradient
is that of the global token mean however the rows are split over ranks and micro-batches.
"""

import dataclasses

import torch

from roll.algorithms.distill import TeacherTopK, distill_loss, teacher_topk
from roll.algorithms.loss_tokens import IGNORE_INDEX
from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.distributed.worker import Worker
from roll.strategies import create_strategy
from roll.workers.checkpointing import CheckpointMixin
from roll.workers.memory import MemoryMixin

LOSS_MASK_KEYS = ["labels_for_loss"]  # ROLL's loss_mask_keys of the distillation pipeline
TEACHER_KEYS = ("teacher_probs", "teacher_log_probs", "teacher_topk_indices", "teacher_inf_mask")  # ROLL's names


class TeacherWorker(MemoryMixin, Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        # the teacher's forward micro-batch is its per_device_train_batch_size, as in ROLL (a worker-local copy)
        args = self.worker_config.training_args
        self.worker_config = dataclasses.replace(self.worker_config, infer_batch_size=args.per_device_train_batch_size)
        self.strategy = create_strategy(self.worker_config.strategy_args.strategy_name, self)
        self.strategy.initialize(total_steps=total_steps)

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    @torch.no_grad()
    def forward(self, batch: DataProto) -> DataProto:
        """`meta_info["distill"]`: logits_topk, target_vocab_size, kd_temperature, teacher_temperature. Returns
        teacher_probs, teacher_log_probs, teacher_inf_mask (B, S, K) and teacher_topk_indices (B, S, K; absent
        with logits_topk = 0, the full vocabulary)."""
        settings = batch.meta_info["distill"]
        topk = settings["logits_topk"]
        batch.batch["responses"] = batch.batch["input_ids"][:, 1:]  # every position that predicts a token
        batch.batch["response_mask"] = batch.batch["attention_mask"][:, 1:]

        def pack(micro, logits):
            out = teacher_topk(
                logits, topk, settings["target_vocab_size"], settings["kd_temperature"], settings["teacher_temperature"]
            )
            parts = [out.probs.float(), out.log_probs.float(), out.inf_mask.float()]
            if out.indices is not None:
                parts.append(out.indices.float())  # exact: vocabulary ids < 2^24
            return torch.cat(parts, dim=-1)

        # the strategies' scoring pass (row order, micro-batches, sharded engines' alignment and Megatron's vocab
        # gather are theirs); its fn returns the packed top-k per position
        packed = self.strategy._score(batch, pack)
        width = packed.shape[-1] // (4 if topk else 3)
        probs, log_probs, inf_mask, *indices = packed.split(width, dim=-1)
        rows = packed.shape[0]
        last = torch.full((rows, 1, width), 1.0 / width)  # the last position: uniform, never selected by a label
        out = {
            "teacher_probs": torch.cat([probs, last], dim=1),
            "teacher_log_probs": torch.cat([log_probs, last.log()], dim=1),
            "teacher_inf_mask": torch.cat([inf_mask.bool(), torch.zeros_like(last, dtype=torch.bool)], dim=1),
        }
        if indices:
            out["teacher_topk_indices"] = torch.cat([indices[0].long(), torch.zeros_like(last, dtype=torch.long)], 1)
        return DataProto.from_dict(tensors=out)


class StudentWorker(CheckpointMixin, MemoryMixin, Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        self.strategy = create_strategy(self.worker_config.strategy_args.strategy_name, self)
        self.strategy.initialize(total_steps=total_steps)

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def train_step(self, batch: DataProto) -> dict:
        """One optimizer step over this rank's rows with the teacher's tensors (TEACHER_KEYS) beside them.
        `meta_info["distill"]`: kd_objective, distill_loss_weight, kd_temperature, adaptive_kl_alpha, skew_lambda.
        Metrics: ROLL's train/loss@sum, train/train_distill_loss@sum, train/train_student_loss@sum (summed over the
        data-parallel ranks: the step's global token means), student/grad_norm, student/lr."""
        batch.meta_info["loss_mask_keys"] = LOSS_MASK_KEYS
        metrics = self.strategy.train_step(batch, self._loss)
        return {key if "/" in key else f"{self.worker_name}/{key}": value for key, value in metrics.items()}

    def _loss(self, micro: DataProto, logits: torch.Tensor):
        settings, tensors = micro.meta_info["distill"], micro.batch
        teacher = TeacherTopK(
            tensors["teacher_probs"],
            tensors["teacher_log_probs"],
            tensors.get("teacher_topk_indices"),
            tensors["teacher_inf_mask"],
        )
        loss, metrics = distill_loss(
            logits,
            tensors["labels_for_loss"],
            teacher,
            micro.meta_info["batch_num_tokens"]["labels_for_loss"],
            settings["kd_objective"],
            settings["distill_loss_weight"],
            kd_temperature=settings["kd_temperature"],
            adaptive_kl_alpha=settings["adaptive_kl_alpha"],
            skew_lambda=settings["skew_lambda"],
        )
        scale = micro.meta_info["loss_scale"]
        # the strategy averages a metric over this rank's micro-batches and the pipeline sums it over data-parallel
        # ranks: value × scale / dp_size per micro-batch makes that the step's global token mean
        dp_size = self.data_parallel_info()["dp_size"]
        return loss * scale, {key: value * scale / dp_size for key, value in metrics.items()}

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def val_step(self, batch: DataProto) -> DataProto:
        """Forward only: `label_log_probs` (rows, S − 1), log p(token t + 1 | tokens ≤ t) where labels_for_loss[t + 1]
        is a label, 0 elsewhere (the strategies' scoring pass, in infer_batch_size micro-batches)."""
        targets = batch.batch["labels_for_loss"][:, 1:]
        batch.batch["responses"] = targets.clamp(min=0)
        batch.batch["response_mask"] = (targets != IGNORE_INDEX).float()
        return DataProto.from_dict(tensors={"label_log_probs": self.strategy.compute_log_probs(batch)})
