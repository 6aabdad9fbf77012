"""The policy-loss keys of a config (ROLL's `pg_variant`, the clip keys, `ratio_type`) → the loss the
training step runs: its registry name, roll.algorithms.PolicyLossConfig and the step's LossSettings.
The imports below are function-local so that loading a config does not import torch."""


def policy_loss_config(config):
    """ROLL-style clip keys → roll.algorithms.PolicyLossConfig (the one mapping; docs/configuration.md)."""
    from roll.algorithms import PolicyLossConfig

    low = config.pg_clip if config.pg_clip_low is None else config.pg_clip_low
    high = config.pg_clip if config.pg_clip_high is None else config.pg_clip_high
    if config.use_pg_clip_range is False:  # ROLL: the range keys are ignored unless use_pg_clip_range
        low = high = config.pg_clip
    return PolicyLossConfig(
        clip_ratio=config.pg_clip,
        clip_ratio_low=low,
        clip_ratio_high=high,
        # no dual clip = a cap that never binds
        clip_ratio_c=config.dual_clip_ratio_c if config.dual_clip_loss else float("inf"),
        clip_cov_ratio=config.clip_cov_ratio,
        clip_cov_lb=config.clip_cov_lb,
        clip_cov_ub=config.clip_cov_ub,
        kl_cov_ratio=config.kl_cov_ratio,
        ppo_kl_coef=config.ppo_kl_coef,
        tau_pos=config.tau_pos,
        tau_neg=config.tau_neg,
        tis_lower_bound=config.tis_lower_bound,
        tis_upper_bound=config.tis_upper_bound,
        kimi15_tau=config.kimi15_tau,
        topr_positive_weight=config.topr_positive_weight,
        topr_negative_weight=config.topr_negative_weight,
        importance_sampling=config.ratio_level,
    )


PG_VARIANTS = {"ppo": "vanilla", "tis": "tis", "topr": "topr", "cispo": "cispo", "kimi15": "kimi15"}


def effective_policy_loss_mode(config) -> str:
    """ROLL's `pg_variant`, when set, names the loss; else `policy_loss_mode`."""
    return config.policy_loss_mode if config.pg_variant is None else PG_VARIANTS[config.pg_variant]


def loss_settings(config, step: int):
    """The LossSettings of pipeline step `step` (0-based) from an RLVR or agentic config: what the trained
    roles' losses read, sent with the training batch."""
    from roll.strategies.loss_settings import LossSettings

    return LossSettings(
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
