"""The epoch / mini-batch loop of a PPO update, shared by the actor and the critic."""

from collections import defaultdict

import numpy as np
import torch

from roll.distributed.data_proto import DataProto
from roll.strategies.loss_settings import LossSettings


class PPOEpochsMixin:
    """For a Worker (rank, worker_config, data_parallel_info) with a training `strategy`."""

    def ppo_epochs(self, batch: DataProto, loss_fn, metric_prefix: str, seed_offset: int = 0) -> dict:
        """`ppo_epochs` passes over this rank's rows, each in a fresh random order (seeded by the data-parallel
        rank: the model-parallel ranks sharing the rows must take the same mini-batches), one
        strategy.train_step (one optimizer step) per mini-batch of per_device_train_batch_size ×
        gradient_accumulation_steps rows.
        Returns each metric's mean over the mini-batches; unprefixed keys (grad_norm, lr) get `metric_prefix/`.
        `seed_offset` lets two roles training on the same batch draw different orders."""
        settings = LossSettings.of(batch)
        args = self.worker_config.training_args
        mini_batch = args.per_device_train_batch_size * args.gradient_accumulation_steps
        dp_rank = self.data_parallel_info()["dp_rank"]
        generator = torch.Generator().manual_seed(int(settings.shuffle_seed) + seed_offset + dp_rank)
        history = defaultdict(list)
        for _ in range(settings.ppo_epochs):
            order = torch.randperm(len(batch), generator=generator)
            for start in range(0, len(batch), mini_batch):
                mini = batch[order[start : start + mini_batch]]
                for key, value in self.strategy.train_step(mini, loss_fn).items():
                    history[key if "/" in key else f"{metric_prefix}/{key}"].append(value)
        return {key: float(np.mean(values)) for key, values in history.items()}
