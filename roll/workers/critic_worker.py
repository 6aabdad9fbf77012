"""The value model for GAE (`critic` role): per-token values and the clipped value loss."""

from collections import defaultdict

import numpy as np
import torch

from roll.algorithms import compute_value_loss
from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.distributed.worker import Worker
from roll.strategies import create_strategy
from roll.utils.functional import slice_response_logits
from roll.workers.checkpointing import CheckpointMixin
from roll.workers.memory import MemoryMixin


class CriticWorker(CheckpointMixin, MemoryMixin, Worker):
    model_kind = "value"  # strategies build a one-output token-classification head for this worker

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        self.strategy = create_strategy(self.worker_config.strategy_args.strategy_name, self)
        self.strategy.initialize(total_steps=total_steps)

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def compute_values(self, batch: DataProto) -> DataProto:
        values = self.strategy.compute_values(batch) * batch.batch["response_mask"]
        return DataProto.from_dict(tensors={"values": values})

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def train_step(self, batch: DataProto) -> dict:
        settings = batch.meta_info["loss"]
        args = self.worker_config.training_args
        mini_batch = args.per_device_train_batch_size * args.gradient_accumulation_steps
        generator = torch.Generator().manual_seed(int(settings["shuffle_seed"]) + 1000 + self.rank)
        history = defaultdict(list)
        for _ in range(settings["ppo_epochs"]):
            order = torch.randperm(len(batch), generator=generator)
            for start in range(0, len(batch), mini_batch):
                for key, value in self.strategy.train_step(
                    batch[order[start : start + mini_batch]], self._value_loss
                ).items():
                    history[f"critic/{key}" if "/" not in key else key].append(value)
        return {key: float(np.mean(values)) for key, values in history.items()}

    def _value_loss(self, micro: DataProto, logits: torch.Tensor):
        settings = micro.meta_info["loss"]
        mask = micro.batch["response_mask"]
        vpreds = slice_response_logits(logits, mask.shape[1]).squeeze(-1) * mask
        loss, clipfrac = compute_value_loss(
            vpreds,
            micro.batch["returns"],
            micro.batch["values"],
            mask,
            cliprange_value=settings["value_clip"],
            loss_agg_mode=settings["loss_agg_mode"],
        )
        return loss, {"critic/vf_loss": loss.item(), "critic/vf_clipfrac": float(clipfrac)}
