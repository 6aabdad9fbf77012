"""The value model for GAE (`critic` role): per-token values and the clipped value loss."""

import torch

from roll.algorithms import compute_value_loss
from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.distributed.worker import Worker
from roll.strategies import create_strategy
from roll.strategies.loss_settings import LossSettings
from roll.utils.functional import slice_response_logits
from roll.workers.checkpointing import CheckpointMixin
from roll.workers.memory import MemoryMixin
from roll.workers.ppo_epochs import PPOEpochsMixin

SHUFFLE_SEED_OFFSET = 1000  # the critic's mini-batches are drawn in another order than the actor's


class CriticWorker(CheckpointMixin, MemoryMixin, PPOEpochsMixin, Worker):
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
        """PPO update with the value loss (PPOEpochsMixin.ppo_epochs); metrics under critic/."""
        return self.ppo_epochs(batch, self._value_loss, metric_prefix="critic", seed_offset=SHUFFLE_SEED_OFFSET)

    def _value_loss(self, micro: DataProto, logits: torch.Tensor):
        settings = LossSettings.of(micro)
        mask = micro.batch["response_mask"]
        vpreds = slice_response_logits(logits, mask.shape[1]).squeeze(-1) * mask
        loss, clipfrac = compute_value_loss(
            vpreds,
            micro.batch["returns"],
            micro.batch["values"],
            mask,
            cliprange_value=settings.value_clip,
            loss_agg_mode=settings.loss_agg_mode,
        )
        return loss, {"critic/vf_loss": loss.item(), "critic/vf_clipfrac": float(clipfrac)}
