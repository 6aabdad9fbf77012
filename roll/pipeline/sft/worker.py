"""The `sft_train` role's worker: one optimizer step of the SFT loss per train_step, and the validation loss.

The loss of a micro-batch is its label tokens' cross-entropy sum over the global label count N of the optimizer
step (roll.algorithms.sft.sft_loss: the strategy's train_step puts N and loss_scale on every micro-batch when the
batch names `loss_mask_keys`), times loss_scale = ranks × micro-batches, which cancels the engines' averaging over
both: the step's gradient is that of the global token mean, however the rows are split over ranks and
micro-batches.
"""

import torch

from roll.algorithms.loss_tokens import IGNORE_INDEX
from roll.algorithms.sft import sft_loss
from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.distributed.worker import Worker
from roll.strategies import create_strategy
from roll.workers.checkpointing import CheckpointMixin
from roll.workers.memory import MemoryMixin

LOSS_MASK_KEYS = ["labels"]  # ROLL's loss_mask_keys of the SFT pipeline


class SFTWorker(CheckpointMixin, MemoryMixin, Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        self.strategy = create_strategy(self.worker_config.strategy_args.strategy_name, self)
        self.strategy.initialize(total_steps=total_steps)

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def train_step(self, batch: DataProto) -> dict:
        """One optimizer step over this rank's rows (per_device_train_batch_size × gradient_accumulation_steps).
        Metrics under `<role>/`: loss@sum (summed over the data-parallel ranks it is the step's token-mean
        cross-entropy, ROLL's metric), grad_norm, lr."""
        batch.meta_info["loss_mask_keys"] = LOSS_MASK_KEYS
        metrics = self.strategy.train_step(batch, self._loss)
        return {key if "/" in key else f"{self.worker_name}/{key}": value for key, value in metrics.items()}

    def _loss(self, micro: DataProto, logits: torch.Tensor):
        tokens, scale = micro.meta_info["batch_num_tokens"]["labels"], micro.meta_info["loss_scale"]
        loss, _ = sft_loss(logits, micro.batch["labels"], tokens)
        loss = loss * scale
        # the strategy averages a metric over this rank's micro-batches, the pipeline sums it over data-parallel
        # ranks: loss × scale / dp_size per micro-batch makes that the step's Σ CE / N (model-parallel ranks
        # share rows and count them alike, so dp_size is what is left of the scale)
        dp_size = self.data_parallel_info()["dp_size"]
        return loss, {f"{self.worker_name}/loss@sum": loss.item() / dp_size}

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def val_step(self, batch: DataProto) -> DataProto:
        """Forward only: `label_log_probs` (rows, S − 1), log p(labels[t] | tokens ≤ t) where labels[t] is a
        target, 0 elsewhere. Column S − 1 of the shifted labels is always IGNORE_INDEX, so the scoring pass of
        width S − 1 (the strategies' compute_log_probs, in infer_batch_size micro-batches) covers every target."""
        targets = batch.batch["labels"][:, :-1]
        batch.batch["responses"] = targets.clamp(min=0)
        batch.batch["response_mask"] = (targets != IGNORE_INDEX).float()
        return DataProto.from_dict(tensors={"label_log_probs": self.strategy.compute_log_probs(batch)})
