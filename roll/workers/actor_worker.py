"""The policy worker: one class serves `actor_train`, `actor_infer` and `reference`.

Which methods a role uses depends on its strategy: an inference strategy generates and scores,
a training strategy also trains and exports weights. Loss settings travel with each training batch
(`LossSettings`), so the worker holds no copy of the algorithm config that could go stale.
"""

import dataclasses

import torch

from roll.algorithms import agg_loss, entropy_from_logits, get_policy_loss_fn, kl_penalty, policy_loss_inputs
from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import CONCURRENCY_GROUPS, Dispatch, register
from roll.distributed.worker import Worker
from roll.strategies import create_strategy, strategy_class
from roll.strategies.base import RequestResult
from roll.strategies.loss_settings import LossSettings
from roll.utils.functional import response_log_probs, slice_response_logits
from roll.workers.checkpointing import CheckpointMixin
from roll.workers.memory import MemoryMixin
from roll.workers.ppo_epochs import PPOEpochsMixin
from roll.workers.weight_sync_worker import WeightTransferMixin


class ActorWorker(CheckpointMixin, MemoryMixin, PPOEpochsMixin, WeightTransferMixin, Worker):
    @classmethod
    def concurrency_groups(cls, worker_config) -> dict:
        """Roles whose strategy generates get the "control" group, so that abort_request reaches a worker
        while its generate_request runs; the others keep Ray's plain one-call-at-a-time worker."""
        args = worker_config.strategy_args
        if args is not None and "generate" in strategy_class(args.strategy_name).roles:
            return {"control": CONCURRENCY_GROUPS["control"]}
        return {}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize(self, total_steps: int = 0) -> None:
        self.strategy = create_strategy(self.worker_config.strategy_args.strategy_name, self)
        self.strategy.initialize(total_steps=total_steps)

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def generate(self, batch: DataProto) -> DataProto:
        return self.strategy.generate(batch, batch.meta_info.get("generation_config", {}))

    # --- request-level generation (dynamic sampling, async rollout): one worker per call -------------------
    @register(dispatch_mode=Dispatch.ONE_RANK)
    def generate_request(self, request_id: str, prompt_ids: list[int], sampling: dict | None = None) -> RequestResult:
        """`cluster.generate_request(rank, request_id, prompt_ids, sampling)`: one sample on worker `rank`
        (InferenceStrategy.generate_request), blocking until it ends or is aborted. It queues with the
        worker's other calls (generate, weight loads), so it never overlaps them."""
        return self.strategy.generate_request(request_id, list(prompt_ids), sampling)

    @register(dispatch_mode=Dispatch.ONE_RANK)
    def generate_requests(self, requests: list[tuple[str, list[int], dict | None]]) -> list[RequestResult]:
        """`cluster.generate_requests(rank, requests)`: several (request_id, prompt_ids, sampling) requests on
        worker `rank` in one call, batched by the engine (InferenceStrategy.generate_requests); each can be
        aborted on its own."""
        return self.strategy.generate_requests([(rid, list(ids), sampling) for rid, ids, sampling in requests])

    @register(dispatch_mode=Dispatch.ONE_RANK, concurrency_group="control")
    def abort_requests(self, request_ids: list[str]) -> list[bool]:
        """`cluster.abort_requests(rank, ids)`: abort_request for each id, in one call."""
        strategy = getattr(self, "strategy", None)
        return [strategy.abort_request(rid) if strategy is not None else False for rid in request_ids]

    @register(dispatch_mode=Dispatch.ONE_RANK, concurrency_group="control")
    def abort_request(self, request_id: str) -> bool:
        """`cluster.abort_request(rank, request_id)`: stop that worker's in-flight request (its
        generate_request returns finish_reason "abort"); False if the id is not in flight there. Runs beside
        the request (the "control" concurrency group), not after it."""
        strategy = getattr(self, "strategy", None)  # the control group does not wait for initialize
        return strategy.abort_request(request_id) if strategy is not None else False

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def compute_log_probs(self, batch: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"log_probs": self.strategy.compute_log_probs(batch)})

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def compute_reference_log_probs(self, batch: DataProto) -> DataProto:
        """actor_train with LoRA: log-probs of the frozen base model (adapters disabled), in place of a
        reference role (roll.configs.checks.reference_source)."""
        return DataProto.from_dict(tensors={"log_probs": self.strategy.compute_reference_log_probs(batch)})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def adapter_config(self) -> dict:
        """actor_train with LoRA: the adapter's peft config (adapter-only weight sync)."""
        return self.strategy.adapter_config()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def adapter_checksum(self) -> float:
        """Checksum of the LoRA adapter this worker trains (actor_train, collective) or serves (actor_infer)."""
        return self.strategy.adapter_checksum()

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def compute_sum_pi_squared(self, batch: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"sum_pi_squared": self.strategy.compute_sum_pi_squared(batch)})

    @register(dispatch_mode=Dispatch.DP_MP_COMPUTE)
    def train_step(self, batch: DataProto) -> dict:
        """PPO update with the policy loss (PPOEpochsMixin.ppo_epochs); metrics under actor/."""
        return self.ppo_epochs(batch, self._policy_loss, metric_prefix="actor")

    def _policy_loss(self, micro: DataProto, logits: torch.Tensor):
        settings = LossSettings.of(micro)
        responses, mask = micro.batch["responses"], micro.batch["response_mask"]
        logits = slice_response_logits(logits, responses.shape[1])
        log_probs = response_log_probs(logits, responses, settings.temperature)
        loss_fn = get_policy_loss_fn(settings.policy_loss_mode)
        # the training strategy adds the step's global token/row counts (train_common.global_batch_info)
        scale = settings.agg_scale
        pg_loss, metrics = loss_fn(
            old_log_prob=micro.batch["old_log_probs"],
            log_prob=log_probs,
            advantages=micro.batch["advantages"],
            response_mask=mask,
            loss_agg_mode=settings.loss_agg_mode,
            config=dataclasses.replace(settings.policy_loss_config, global_batch_info=scale or None),
            rollout_is_weights=micro.batch.get("rollout_is_weights"),
            **{key: micro.batch[key] for key in policy_loss_inputs(settings.policy_loss_mode)},
        )
        metrics = {f"actor/{key}": value for key, value in metrics.items()}
        metrics["actor/pg_loss"] = pg_loss.item()
        loss = pg_loss
        if settings.use_kl_loss:
            kl = kl_penalty(log_probs, micro.batch["ref_log_probs"], settings.kl_loss_type)
            kl_loss = agg_loss(kl, mask, settings.loss_agg_mode, **scale)
            loss = loss + settings.kl_loss_coef * kl_loss
            metrics["actor/kl_loss"] = kl_loss.item()
        loss = loss * settings.rl_loss_coef  # ROLL's RLVR actor: the RL terms only, not the entropy bonus
        if settings.entropy_loss_coef:
            entropy = agg_loss(
                entropy_from_logits(logits.float() / settings.temperature), mask, settings.loss_agg_mode, **scale
            )
            loss = loss - settings.entropy_loss_coef * entropy
            metrics["actor/entropy"] = entropy.item()
        return loss, metrics

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_weights(self) -> dict:
        """Full HF-named weights; every rank must join (ZeRO-3 gathers), rank 0 returns them."""
        weights = {name: tensor.detach().cpu().clone() for name, tensor in self.strategy.named_hf_parameters()}
        return weights if self.rank == 0 else {}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_weights(self, weights: dict) -> None:
        self.strategy.load_weights(weights.items())
