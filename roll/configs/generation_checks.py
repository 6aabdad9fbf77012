"""Cross-field checks of what is generated and from which prompts: generation settings (lengths, sample
counts, stop strings), data mixing, and the asynchronous rollout."""

from roll.configs.checks import roles, strategies_with
from roll.configs.loader import ConfigError
from roll.utils.logging import get_logger

logger = get_logger("roll.config")


def check_stop_strings(config, path: str, args) -> None:
    engine = config.actor_infer.strategy_args.strategy_name
    if args.stop_strings and engine not in strategies_with("stop_strings"):
        raise ConfigError(
            f"'{path}.stop_strings' is set but actor_infer's engine {engine!r} does not apply stop strings "
            f"(ROLL's HF strategy ignores them too); use one of {strategies_with('stop_strings')} or remove them"
        )


def check_generation(config) -> None:
    """Responses are `response_length` wide everywhere; sampling counts come from the group size."""
    blocks = [("actor_infer.generating_args", config.actor_infer.generating_args, config.num_return_sequences_in_group)]
    if config.validation is not None:
        blocks.append(("validation.generating_args", config.validation.generating_args, None))
        check_validation_samples(config.validation.generating_args)
    for path, args, group in blocks:
        check_stop_strings(config, path, args)
        if args.max_new_tokens is None:
            args.max_new_tokens = config.response_length
        elif args.max_new_tokens != config.response_length:
            raise ConfigError(
                f"'{path}.max_new_tokens' = {args.max_new_tokens} differs from response_length = "
                f"{config.response_length}; set it to ${{response_length}} or null"
            )
        if group is not None:
            if args.num_return_sequences is None:
                args.num_return_sequences = group
            elif args.num_return_sequences != group:
                raise ConfigError(
                    f"'{path}.num_return_sequences' = {args.num_return_sequences} differs from "
                    f"num_return_sequences_in_group = {group}; set it to "
                    f"${{num_return_sequences_in_group}} or null"
                )
    if config.eval_steps and config.validation is None:  # ROLL's YAMLs set eval_steps without validation data
        logger.warning(
            "eval_steps = %d but there is no 'validation' block: no validation will run (add "
            "validation.data_args.file_name to validate, or set eval_steps: 0 to silence this)",
            config.eval_steps,
        )
    if config.actor_train.data_args.file_name is None:
        raise ConfigError("'actor_train.data_args.file_name' is required: the training prompt file(s)")
    check_data_mixing(config)


def check_data_mixing(config) -> None:
    """The mixing keys are the training prompts' (actor_train.data_args); domain keys name reward domains."""
    for name, worker in roles(config).items():
        args = worker.data_args
        for key in ("interleave_probs", "domain_interleave_probs"):
            if name != "actor_train" and getattr(args, key) is not None:
                raise ConfigError(f"'{name}.data_args.{key}': only actor_train's training prompts are mixed")
    validation = getattr(config, "validation", None)
    if validation is not None and (
        validation.data_args.interleave_probs is not None or validation.data_args.domain_interleave_probs is not None
    ):
        raise ConfigError(
            "'validation.data_args': interleave_probs / domain_interleave_probs mix training prompts only"
        )
    probs = config.actor_train.data_args.domain_interleave_probs
    if probs is not None:
        unknown = sorted(set(probs) - set(config.rewards))
        if unknown:
            raise ConfigError(
                f"'actor_train.data_args.domain_interleave_probs' names {unknown}, which are not reward domains; "
                f"valid: {sorted(config.rewards)}"
            )


def check_request_rollout(config) -> None:
    """generate_opt_level (RLVR): 0 = batched generate calls, 1 = request-level rollout (every actor_infer
    engine serves requests); partial_rollout needs it and an async ratio (only a weight sync mid-rollout aborts)."""
    level = getattr(config, "generate_opt_level", 0)  # 0 or 1: its range is checked when the config loads
    if config.partial_rollout and (level != 1 or config.async_generation_ratio == 0):
        raise ConfigError(
            f"'partial_rollout': true needs generate_opt_level: 1 and async_generation_ratio > 0 (got "
            f"{level} and {config.async_generation_ratio}): only a weight sync during generation aborts requests"
        )
    if level == 1:
        filtered = [d for d, reward in config.rewards.items() if reward.query_filter_config.type != "no_filter"]
        if filtered:
            raise ConfigError(
                f"'generate_opt_level': 1 with dynamic sampling (rewards.{filtered[0]}.query_filter_config) is not "
                "supported: set generate_opt_level: 0 or turn the filter off"
            )


def check_async(config) -> None:
    """async_generation_ratio > 0 overlaps generation with training: actor_infer must have devices of its own
    (a colocated engine is offloaded while another role runs, so nothing could overlap)."""
    if hasattr(config, "generate_opt_level"):
        check_request_rollout(config)
    elif config.partial_rollout and config.async_generation_ratio == 0:
        raise ConfigError(
            "'partial_rollout': true needs async_generation_ratio > 0: only a weight sync during a rollout is "
            "affected by it"
        )
    ratio = config.async_generation_ratio
    if ratio == 0:
        return
    if ratio < 0 or ratio != int(ratio):
        raise ConfigError(
            f"'async_generation_ratio' = {ratio}: must be 0 (synchronous) or a whole number of steps ahead "
            "(1, 2, ...); fractional ratios are not supported"
        )
    stale = getattr(config, "async_stale_samples", "regenerate")  # RLVR only (agentic: lag = k by schedule)
    if stale not in ("regenerate", "drop"):
        raise ConfigError(f"'async_stale_samples' = {stale!r}; valid: ['regenerate', 'drop']")
    from roll.algorithms import get_adv_estimator_spec

    if get_adv_estimator_spec(config.adv_estimator).greedy_baseline:
        raise ConfigError(
            f"'async_generation_ratio' > 0 does not support adv_estimator: {config.adv_estimator} (its greedy "
            "baselines would be generated by a different policy version)"
        )
    rewards = getattr(config, "rewards", {})
    filtered = [d for d, reward in rewards.items() if reward.query_filter_config.type != "no_filter"]
    if filtered:
        raise ConfigError(
            f"'async_generation_ratio' = {ratio} with dynamic sampling (rewards.{filtered[0]}.query_filter_config) "
            "is not supported: refill rounds would need prompts of steps already generated ahead; set one of them off"
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


def check_validation_samples(args) -> None:
    """Validation samples per prompt: null means 1; n > 1 needs sampling (n greedy answers are one answer n
    times, and HF generate refuses them) and reports pass@k besides the mean score."""
    if args.num_return_sequences is None:
        args.num_return_sequences = 1
    n = args.num_return_sequences
    if n < 1:
        raise ConfigError(f"'validation.generating_args.num_return_sequences' = {n}: must be ≥ 1")
    if n > 1 and not args.do_sample:
        raise ConfigError(
            f"'validation.generating_args.num_return_sequences' = {n} with do_sample: false gives {n} copies of "
            f"the greedy answer; set validation.generating_args.do_sample: true (for pass@k) or "
            f"num_return_sequences: 1"
        )
