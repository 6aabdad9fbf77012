"""The config rules of the policy-optimisation kinds (RLVR, agentic): the roles they need, the RL maths and its
requirements (estimator, losses, KL, rollout IS), where the reference log-probs come from, the LoRA weight sync
and the asynchronous rollout."""

from roll.configs.checks import _strategy_of, roles, strategies_with
from roll.configs.loader import ConfigError, closest
from roll.configs.policy_loss import effective_policy_loss_mode
from roll.utils.logging import get_logger

logger = get_logger("roll.config")


def check_actor_roles(config) -> None:
    """The trainer and the rollout engine both (a kind that may run without a trainer checks that itself)."""
    if config.actor_train is None or config.actor_infer is None:
        raise ConfigError(
            "a pipeline config needs both 'actor_train' (the trainer) and 'actor_infer' (the rollout engine)"
        )


def check_lora_weight_sync(config) -> None:
    """lora_weight_sync: adapter needs a LoRA actor and a rollout engine that serves adapters, set up for them."""
    if config.lora_weight_sync != "adapter":
        return
    actor = config.actor_train.model_args
    if not actor.lora:
        raise ConfigError(
            "'lora_weight_sync' = 'adapter' needs a LoRA actor_train (actor_train.model_args.lora_target); "
            "set lora_weight_sync: merged"
        )
    train_cls = _strategy_of(config.actor_train)
    if train_cls is not None and not hasattr(train_cls, "named_adapter_parameters"):
        raise ConfigError(
            f"'lora_weight_sync' = 'adapter': actor_train strategy {config.actor_train.strategy_args.strategy_name!r} "
            "cannot export its adapters in peft's layout (it syncs merged weights); set lora_weight_sync: merged"
        )
    infer = config.actor_infer
    strategy = infer.strategy_args.strategy_name
    strategy_cls = _strategy_of(infer)
    if strategy_cls is None or not strategy_cls.lora_adapters:
        raise ConfigError(
            f"'lora_weight_sync' = 'adapter': actor_infer strategy {strategy!r} cannot serve LoRA adapters; use "
            f"one of {strategies_with('lora_adapters', 'generate')} or lora_weight_sync: merged"
        )
    engine = infer.strategy_args.strategy_config or {}
    if engine.get("enable_lora") is not True:
        raise ConfigError(
            "'lora_weight_sync' = 'adapter' needs 'actor_infer.strategy_args.strategy_config.enable_lora: true' "
            f"(and max_lora_rank ≥ actor_train.model_args.lora_rank = {actor.lora_rank})"
        )
    if not actor.adapter_name_or_path and engine.get("max_lora_rank", 16) < actor.lora_rank:
        raise ConfigError(
            f"'actor_infer.strategy_args.strategy_config.max_lora_rank' = {engine.get('max_lora_rank', 16)} is "
            f"below actor_train.model_args.lora_rank = {actor.lora_rank}"
        )


def reference_source(config) -> str | None:
    """Where the reference log-probs come from: "reference" (the reference role), "actor_train" (a LoRA
    actor with its adapters disabled = the frozen base model, no second model and no reference devices),
    or None (nothing reads them, or nothing can give them).

    A LoRA actor trained from model_name_or_path serves as its own reference when no reference role is
    configured or when the configured one is the same base model (same model_name_or_path and dtype); the
    role is then not started. A LoRA actor continuing an adapter (adapter_name_or_path) is not its own
    initial policy once adapters are disabled, so it never replaces a configured reference role."""
    if not (config.use_kl_loss or config.add_token_level_kl):
        return None
    actor = config.actor_train.model_args if config.actor_train is not None else None
    lora_actor = actor is not None and actor.lora
    if config.reference is None:
        return "actor_train" if lora_actor else None
    ref = config.reference.model_args
    same_base = (
        lora_actor
        and ref is not None
        and not actor.adapter_name_or_path
        and ref.model_name_or_path == actor.model_name_or_path
        and ref.dtype == actor.dtype
    )
    return "actor_train" if same_base else "reference"


def describe_reference(config) -> str | None:
    """One line for --dry_run and the start-up report: which model gives the reference log-probs."""
    source = reference_source(config)
    if source is None:
        return None
    if source == "actor_train":
        why = "no reference role configured" if config.reference is None else "the reference role is the same base"
        return f"reference log-probs: actor_train with its LoRA adapters disabled (the frozen base model; {why}" + (
            ", so the reference role is not started)" if config.reference is not None else ")"
        )
    strategy = config.reference.strategy_args.strategy_name if config.reference.strategy_args else "?"
    return f"reference log-probs: the reference role ({strategy}, {config.reference.model_args.model_name_or_path})"


def check_algorithm(config) -> None:
    from roll.algorithms import (
        ADV_ESTIMATOR_REGISTRY,
        KL_ESTIMATORS,
        get_adv_estimator_fn,
        get_adv_estimator_spec,
        get_policy_loss_fn,
    )
    from roll.configs.opd import check_opd

    check_opd(config)  # first: its kl_penalty and reference rules say why, in OPD's terms
    for key, lookup in (("adv_estimator", get_adv_estimator_fn), ("policy_loss_mode", get_policy_loss_fn)):
        try:
            lookup(getattr(config, key))
        except (KeyError, ValueError) as error:
            raise ConfigError(f"'{key}' = {getattr(config, key)!r}: {error}") from None
    mode = effective_policy_loss_mode(config)
    if config.importance_sampling == "seq" and mode != "vanilla":
        # ROLL reads it only in its PPO loss; elsewhere it would be a key that silently does nothing
        raise ConfigError(
            f"'importance_sampling' = seq applies to the PPO loss (policy_loss_mode: vanilla / pg_variant: ppo), "
            f"but the loss is {mode!r}; set importance_sampling: token or use the PPO loss (gspo is the "
            "verl loss with a sequence-level ratio)"
        )
    # what the estimator needs comes from its registration (roll.algorithms.register_adv_est), not its name
    estimator = get_adv_estimator_spec(config.adv_estimator)
    train_strategy = config.actor_train.strategy_args.strategy_name
    sum_pi_squared = strategies_with("sum_pi_squared", "train")
    if "sum_pi_squared" in estimator.forward_passes and train_strategy not in sum_pi_squared:
        raise ConfigError(
            f"adv_estimator {config.adv_estimator} needs per-token Σπ² from actor_train, which "
            f"{train_strategy!r} does not compute; use one of {sum_pi_squared}"
        )
    kl_names = list(KL_ESTIMATORS) + [f"{name}+" for name in KL_ESTIMATORS]
    for key in ("kl_loss_type", "kl_penalty"):
        value = getattr(config, key)
        if value not in kl_names:
            raise ConfigError(f"'{key}' = {value!r} is not allowed; choose one of {kl_names}{closest(value, kl_names)}")
    group_key, n = config.group
    if n < estimator.min_group_size:
        raise ConfigError(
            f"adv_estimator {config.adv_estimator!r} compares samples of the same prompt: set "
            f"{group_key} ≥ {estimator.min_group_size} (it is {n})"
        )
    if estimator.needs_critic and config.critic is None:
        raise ConfigError(
            f"adv_estimator: {config.adv_estimator} needs a 'critic' role (a value model); add one or choose grpo"
        )
    if config.critic is not None and not estimator.needs_critic:
        with_values = " / ".join(name for name in ADV_ESTIMATOR_REGISTRY if get_adv_estimator_spec(name).needs_critic)
        raise ConfigError(
            f"a 'critic' role is configured but adv_estimator {config.adv_estimator!r} does not use "
            f"values; remove 'critic' or set adv_estimator: {with_values}"
        )
    if (config.use_kl_loss or config.add_token_level_kl) and reference_source(config) is None:
        raise ConfigError(
            "use_kl_loss / add_token_level_kl need a 'reference' role; add one, or train actor_train with LoRA "
            "(model_args.lora_target: the base model with adapters disabled is then the reference), or turn "
            "both off"
        )
    if config.use_rollout_log_probs:
        strategy, valid = (
            config.actor_infer.strategy_args.strategy_name,
            strategies_with("rollout_log_probs", "generate"),
        )
        if strategy not in valid:  # every built-in engine returns them; a registered custom one may not
            raise ConfigError(
                f"use_rollout_log_probs: true, but actor_infer strategy {strategy!r} does not return per-token "
                f"log-probs of the sampled tokens; use one of {valid} or set use_rollout_log_probs: null"
            )
        for key, on in (("rollout_is_threshold", config.rollout_is_threshold is not None),
                        ("train_infer_correction", config.train_infer_correction.active)):  # fmt: skip
            if on:
                raise ConfigError(
                    f"use_rollout_log_probs: true makes the old log-probs the rollout ones, so {key} would compare "
                    "each token with itself; turn one of them off"
                )
    correction = config.train_infer_correction
    for key, on in (("rollout_is_threshold", config.rollout_is_threshold is not None),
                    ("train_infer_correction", correction.active)):  # fmt: skip
        strategy = config.actor_infer.strategy_args.strategy_name
        rollout_log_probs = strategies_with("rollout_log_probs", "generate")
        if on and strategy not in rollout_log_probs:
            raise ConfigError(
                f"{key} is set, but actor_infer strategy {strategy!r} does not return per-token log-probs of the "
                f"sampled tokens; use one of {rollout_log_probs} or turn {key} off"
            )
    if correction.is_weight.enabled and config.rollout_is:
        raise ConfigError(
            "train_infer_correction.is_weight.enabled and rollout_is both weight the policy loss by π_train/π_rollout;"
            " keep one"
        )


def check_stop_strings(config, path: str, args) -> None:
    engine = config.actor_infer.strategy_args.strategy_name
    if args.stop_strings and engine not in strategies_with("stop_strings"):
        raise ConfigError(
            f"'{path}.stop_strings' is set but actor_infer's engine {engine!r} does not apply stop strings "
            f"(ROLL's HF strategy ignores them too); use one of {strategies_with('stop_strings')} or remove them"
        )


def check_async(config, kind_rules=None) -> None:
    """async_generation_ratio > 0 overlaps generation with training: actor_infer must have devices of its own
    (a colocated engine is offloaded while another role runs, so nothing could overlap). `kind_rules(ratio)`:
    the kind's own rules for a ratio > 0 (e.g. RLVR's stale samples and dynamic sampling)."""
    ratio = config.async_generation_ratio
    if ratio == 0:
        return
    if ratio < 0 or ratio != int(ratio):
        raise ConfigError(
            f"'async_generation_ratio' = {ratio}: must be 0 (synchronous) or a whole number of steps ahead "
            "(1, 2, ...); fractional ratios are not supported"
        )
    if kind_rules is not None:
        kind_rules(ratio)
    from roll.algorithms import get_adv_estimator_spec

    if get_adv_estimator_spec(config.adv_estimator).greedy_baseline:
        raise ConfigError(
            f"'async_generation_ratio' > 0 does not support adv_estimator: {config.adv_estimator} (its greedy "
            "baselines would be generated by a different policy version)"
        )
    infer = set(config.actor_infer.device_mapping or ())
    if not infer:
        raise ConfigError(
            f"'async_generation_ratio' = {ratio} needs actor_infer.device_mapping: the engine's own devices"
        )
    for name, worker in roles(config).items():
        if name == "actor_infer" or name.startswith("rewards.") or worker is None:
            continue
        shared = infer & set(worker.device_mapping or ())
        if shared:
            raise ConfigError(
                f"'async_generation_ratio' = {ratio} needs actor_infer on devices of its own, but actor_infer and "
                f"{name} are colocated on device(s) {sorted(shared)}: colocated roles take turns and cannot "
                f"overlap. Give actor_infer separate device_mapping or set async_generation_ratio: 0"
            )
