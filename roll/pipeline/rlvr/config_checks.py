"""The RLVR kind's own config rules: generation settings and sample counts, data mixing, the request-level and
asynchronous rollout, and the batch arithmetic (prompts × samples per step against each trained role's global
batch)."""

from dataclasses import dataclass

from roll.configs.checks import check_micro_batching, data_parallel_size, roles
from roll.configs.loader import ConfigError
from roll.configs.rl_checks import check_stop_strings
from roll.utils.logging import get_logger

logger = get_logger("roll.config")


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
    validation = config.validation
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
    level = config.generate_opt_level  # 0 or 1: its range is checked when the config loads
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


def check_async_rlvr(config, ratio) -> None:
    """RLVR's rules for async_generation_ratio > 0 (roll.configs.rl_checks.check_async's kind_rules)."""
    stale = config.async_stale_samples
    if stale not in ("regenerate", "drop"):
        raise ConfigError(f"'async_stale_samples' = {stale!r}; valid: ['regenerate', 'drop']")
    filtered = [d for d, reward in config.rewards.items() if reward.query_filter_config.type != "no_filter"]
    if filtered:
        raise ConfigError(
            f"'async_generation_ratio' = {ratio} with dynamic sampling (rewards.{filtered[0]}.query_filter_config) "
            "is not supported: refill rounds would need prompts of steps already generated ahead; set one of them off"
        )


@dataclass
class BatchPlan:
    prompts_per_step: int
    samples_per_step: int
    dp_size: dict  # role → data-parallel size
    global_train_batch: dict  # trained role → per_device × accumulation × dp
    optimizer_steps: dict  # trained role → optimizer steps per pipeline step

    def describe(self) -> str:
        lines = [
            "batch arithmetic:",
            f"  prompts per step                  {self.prompts_per_step} (rollout_batch_size)",
            f"  samples per step                  {self.samples_per_step} (rollout_batch_size × "
            f"num_return_sequences_in_group)",
        ]
        lines += [f"  {role + ' data-parallel size':<34}{size}" for role, size in self.dp_size.items()]
        for role, size in self.global_train_batch.items():
            lines.append(
                f"  {role + ' global batch':<34}{size} (per_device_train_batch_size × gradient_accumulation_steps × dp)"
            )
            lines.append(
                f"  {role + ' optimizer steps':<34}{self.optimizer_steps[role]} per pipeline step "
                f"(ppo_epochs × samples / global batch)"
            )
        return "\n".join(lines)


def batch_plan(config) -> BatchPlan:
    samples = config.rollout_batch_size * config.num_return_sequences_in_group
    dp = {name: data_parallel_size(worker) for name, worker in roles(config).items() if not name.startswith("rewards.")}
    global_batch, optimizer_steps = {}, {}
    for name in ("actor_train", "critic"):
        worker = getattr(config, name)
        if worker is None:
            continue
        args = worker.training_args
        size = args.per_device_train_batch_size * args.gradient_accumulation_steps * dp[name]
        if samples % size:
            raise ConfigError(
                f"{name}: samples per step = rollout_batch_size × num_return_sequences_in_group = "
                f"{config.rollout_batch_size} × {config.num_return_sequences_in_group} = {samples} is not a multiple "
                f"of the global train batch = per_device_train_batch_size × gradient_accumulation_steps × dp = "
                f"{args.per_device_train_batch_size} × {args.gradient_accumulation_steps} × {dp[name]} = {size}; "
                f"change {name}.training_args or rollout_batch_size so that it divides"
            )
        global_batch[name] = size
        optimizer_steps[name] = config.ppo_epochs * samples // size
    check_micro_batching(config)
    return BatchPlan(config.rollout_batch_size, samples, dp, global_batch, optimizer_steps)


def check_prompt_template(config, model_dir: str) -> None:
    """RLVR: the chat template rendered once around a one-character prompt, as every data row will be (a Jinja
    syntax error or a template that raises fails here, naming the file), and that shortest prompt must fit
    prompt_length, or every row would be dropped."""
    data_args = config.actor_train.data_args if config.actor_train is not None else None
    if data_args is None or not data_args.apply_chat_template:
        return
    from transformers import AutoTokenizer

    from roll.data.prompts import check_template_available, render_prompt

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    check_template_available(data_args, tokenizer, data_args.file_name)
    text = render_prompt("x", data_args, tokenizer)
    shortest = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    if shortest > config.prompt_length:
        raise ConfigError(
            f"'prompt_length' = {config.prompt_length}: a one-character prompt is already {shortest} tokens once "
            f"the chat template wraps it ({text!r}), so every prompt would be longer; raise prompt_length"
        )
