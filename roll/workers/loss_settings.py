"""The loss contract of a training step: what the trained roles' losses read, built by the driver once per
step and sent with the batch, so workers hold no copy of the algorithm config that could go stale.

It lives here, beside the losses that read it (`ActorWorker._policy_loss`, `CriticWorker._value_loss`),
rather than in `roll.algorithms`, because it is built from the pipeline config (`from_config`) and
`roll.algorithms` stays free of the config schema (verl's API). This module imports neither Ray nor the
workers: the pipeline, the workers and the training strategies (which add `global_batch_info`) all use it.
"""

import dataclasses
from dataclasses import dataclass

from roll.algorithms import PolicyLossConfig
from roll.configs import effective_policy_loss_mode, policy_loss_config
from roll.distributed.data_proto import DataProto

LOSS_KEY = "loss"  # the one meta_info key a training batch carries its LossSettings under


@dataclass(frozen=True)
class LossSettings:
    ppo_epochs: int  # passes over the step's samples, one optimizer step per mini-batch
    shuffle_seed: int  # mini-batch order of the step: the actor's rank r shuffles with seed + r, the critic's + 1000
    temperature: float  # the rollout's sampling temperature: log-probs and entropy use logits / temperature
    policy_loss_mode: str  # roll.algorithms policy-loss registry key
    loss_agg_mode: str  # how token losses become one loss (policy, KL, entropy and value losses)
    policy_loss_config: PolicyLossConfig  # clip ratios etc., mapped from the ROLL-style keys
    use_kl_loss: bool  # add kl_loss_coef × KL(actor ‖ reference) to the policy loss
    kl_loss_coef: float
    kl_loss_type: str  # KL estimator of the KL loss (roll.algorithms.kl_penalty)
    entropy_loss_coef: float  # entropy bonus coefficient; 0 = off
    value_clip: float  # the critic's value clip range
    rl_loss_coef: float = 1.0  # factor on pg + kl_loss_coef·kl (ROLL's RLVR actor), not on the entropy bonus
    # agg_loss arguments of this optimizer step (global token / row counts over all ranks and micro-batches):
    # set per train_step by the training strategy (train_common.split_train_batch); None = local formulas
    global_batch_info: dict | None = None

    @classmethod
    def from_config(cls, config, step: int) -> "LossSettings":
        """The settings of pipeline step `step` (0-based) from an RLVR or agentic config."""
        return cls(
            ppo_epochs=config.ppo_epochs,
            shuffle_seed=config.seed * 7919 + step,  # a new order every step, reproducible from the seed
            temperature=config.actor_infer.generating_args.temperature,
            policy_loss_mode=effective_policy_loss_mode(config),
            loss_agg_mode=config.loss_agg_mode,
            policy_loss_config=policy_loss_config(config),
            use_kl_loss=config.use_kl_loss,
            kl_loss_coef=config.kl_loss_coef,
            kl_loss_type=config.kl_loss_type,
            entropy_loss_coef=config.entropy_loss_coef,
            value_clip=config.value_clip,
            rl_loss_coef=config.rl_loss_coef,
        )

    @classmethod
    def of(cls, batch: DataProto) -> "LossSettings":
        settings = batch.meta_info.get(LOSS_KEY)
        if not isinstance(settings, cls):
            raise TypeError(
                f"a training batch carries meta_info[{LOSS_KEY!r}] = LossSettings (LossSettings.from_config), "
                f"got {type(settings).__name__}"
            )
        return settings

    def attach(self, batch: DataProto) -> None:
        batch.meta_info[LOSS_KEY] = self

    def with_global_batch_info(self, info: dict) -> "LossSettings":
        return dataclasses.replace(self, global_batch_info=info)

    @property
    def agg_scale(self) -> dict:
        """Keyword arguments for agg_loss: the step's global counts, or {} (local formulas)."""
        return dict(self.global_batch_info or {})
