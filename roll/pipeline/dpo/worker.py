"""The DPO worker: one class serves `actor_train` (train_step: one optimizer step of the DPO loss) and `reference`
(compute_log_probs: frozen per-token log-probs), as ROLL's DPO ActorWorker does.

Batch sizes in the config count pairs (ROLL's YAMLs); the worker's engine works in rows, so it gets a copy of its
role's config with per_device_train_batch_size and infer_batch_size doubled (ROLL doubles them in DPOConfig). The
user's config is left as written. Rows arrive interleaved (chosen_0, rejected_0, …) and every micro-batch holds
whole pairs (an even number of rows, pair-aligned, since the shards and micro-batches are contiguous).

The loss of a micro-batch is the mean over its pairs (roll.algorithms.dpo.dpo_loss); the engines divide it by the
number of micro-batches and average over data-parallel ranks, so the step's gradient is that of the mean over all
pairs of the step (ROLL's apply_loss_scale off).
"""

import copy

import torch

from roll.algorithms.dpo import dpo_loss, dpo_metrics, sequence_log_probs, split_pairs, token_log_probs
from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import Dispatch, register
from roll.distributed.worker import Worker
from roll.strategies import create_strategy
from roll.workers.checkpointing import CheckpointMixin
from roll.workers.memory import MemoryMixin

# ROLL's meta_info keys of the loss settings (the pipeline puts the configured values there: ROLL's never does)
LOSS_KEYS = {"ipo": False, "beta": 0.1, "label_smoothing": 0.0}


def rows_config(worker_config):
    """A copy of a role's config whose batch sizes count rows: 2 × the pairs the user's config counts."""
    rows = copy.deepcopy(worker_config)
    rows.infer_batch_size *= 2
    rows.training_args.per_device_train_batch_size *= 2
    return rows


def loss_settings(meta_info: dict) -> dict:
    return {key: meta_info.get(key, default) for key, default in LOSS_KEYS.items()}


def pair_log_probs(per_token: torch.Tensor, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen, rejected) response-span sums of interleaved rows' per-token log-probs (width S − 1)."""
    return split_pairs(sequence_log_probs(per_token, batch["attention_mask"], batch["prompt_id_lens"]))


def step_loss(policy: torch.Tensor, reference: torch.Tensor, batch, settings: dict):
    """(loss, metrics) of interleaved rows from the policy's and the reference's per-token log-probs."""
    loss, chosen_rewards, rejected_rewards = dpo_loss(
        *pair_log_probs(policy, batch), *pair_log_probs(reference, batch), **settings
    )
    return loss, dpo_metrics(loss.detach(), chosen_rewards, rejected_rewards, prefix="actor")


class DPOWorker(CheckpointMixin, MemoryMixin, Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        self.worker_config = rows_config(self.worker_config)
        self.strategy = create_strategy(self.worker_config.strategy_args.strategy_name, self)
        self.strategy.initialize(total_steps=total_steps)

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def compute_log_probs(self, batch: DataProto) -> DataProto:
        """`log_probs` (rows, S − 1): log p(input_ids[t + 1] | ≤ t) where attention_mask[t + 1] = 1, else 0 (ROLL's
        op_compute_log_probs with the attention mask), by the strategy's scoring pass over the whole sequence."""
        batch.batch["responses"] = batch.batch["input_ids"][:, 1:]
        batch.batch["response_mask"] = batch.batch["attention_mask"][:, 1:]
        return DataProto.from_dict(tensors={"log_probs": self.strategy.compute_log_probs(batch)})

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def train_step(self, batch: DataProto) -> dict:
        """One optimizer step over this rank's pairs; needs `reference_log_probs`. Metrics: ROLL's actor/loss,
        actor/acc, actor/chosen_reward, actor/reject_reward (plus actor/margins), actor/lr, actor_train/grad_norm."""
        settings = loss_settings(batch.meta_info)

        def loss_fn(micro: DataProto, logits: torch.Tensor):
            policy = token_log_probs(logits, micro.batch["input_ids"], micro.batch["attention_mask"])
            return step_loss(policy, micro.batch["reference_log_probs"].to(policy.device), micro.batch, settings)

        metrics = self.strategy.train_step(batch, loss_fn)
        metrics["actor_train/grad_norm"] = metrics.pop("grad_norm")
        metrics["actor/lr"] = metrics.pop("lr")
        return metrics
