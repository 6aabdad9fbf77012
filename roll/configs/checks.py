"""Cross-field checks and the batch arithmetic of an RLVR config.

Derived quantities (world sizes, global batches, optimizer steps) are computed here and printed at
start-up; an inconsistent combination is an error that names the keys to change. User values are
never rewritten: only fields left null are filled, and the report says what they became.
"""

from dataclasses import dataclass

from roll.configs.loader import ConfigError, closest, collected, describe_ids
from roll.configs.policy_loss import effective_policy_loss_mode
from roll.utils.patterns import is_regex

DEFAULT_WORKERS = {
    "actor_train": "roll.workers.actor_worker.ActorWorker",
    "actor_infer": "roll.workers.actor_worker.ActorWorker",
    "reference": "roll.workers.actor_worker.ActorWorker",
    "critic": "roll.workers.critic_worker.CriticWorker",
}
# The strategy capability (a strategy class's `roles`, roll/strategies/base.py) each role needs.
ROLE_CAPABILITY = {"actor_train": "train", "critic": "critic", "actor_infer": "generate", "reference": "score"}


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


def roles(config) -> dict:
    """name → WorkerConfig of every configured role, rewards included."""
    out = {
        name: getattr(config, name)
        for name in ("actor_train", "actor_infer", "reference", "critic")
        if getattr(config, name) is not None
    }
    for reward in getattr(config, "rewards", {}).values():  # a domain with scorers: one role per scorer
        out.update({role: worker for role, (_, _, worker) in reward.scorer_roles().items()})
    return out


def tokenizer_role(config) -> str:
    """The role whose model directory gives the pipeline's tokenizer: actor_train, or actor_infer in an agentic
    rollout-only run (no actor_train)."""
    return "actor_infer" if getattr(config, "rollout_only", False) else "actor_train"


def strategies_with(flag: str | None = None, role: str | None = None) -> list[str]:
    """Registered strategy names, in registry order, whose class sets the capability `flag` (a class
    attribute of roll/strategies/base.py's InferenceStrategy) and serves the pipeline `role`."""
    from roll.strategies import strategy_class, strategy_names

    out = []
    for name in strategy_names():
        cls = strategy_class(name)
        if (flag is None or getattr(cls, flag)) and (role is None or ROLE_CAPABILITY[role] in cls.roles):
            out.append(name)
    return out


def _strategy_of(worker):
    """The strategy class a role's worker names, or None (no strategy_args, or a name the role checks refuse)."""
    from roll.strategies import strategy_class, strategy_names

    if worker.strategy_args is None or worker.strategy_args.strategy_name not in strategy_names():
        return None
    return strategy_class(worker.strategy_args.strategy_name)


def data_parallel_size(worker) -> int:
    strategy = _strategy_of(worker)
    if strategy is None:
        return worker.world_size
    from roll.strategies.ulysses import check_world, ulysses_size_of

    try:
        size = strategy.data_parallel_size(worker.world_size, worker.strategy_args.strategy_config)
        return check_world(ulysses_size_of(worker.model_args), size) if worker.model_args else size
    except ValueError as error:
        raise ConfigError(f"{worker.name}: {error}") from None


def check_run_length(config) -> None:
    """max_steps, or (RLVR) actor_train's num_train_epochs; only actor_train's epochs mean anything."""
    for name, worker in roles(config).items():
        if name != "actor_train" and worker.training_args.num_train_epochs is not None:
            raise ConfigError(f"'{name}.training_args.num_train_epochs': only actor_train's sets the run length")
    epochs = config.actor_train.training_args.num_train_epochs if config.actor_train is not None else None
    if epochs is not None:
        if not hasattr(config, "rewards"):
            raise ConfigError(
                "'actor_train.training_args.num_train_epochs': an agentic run has no prompt dataset to count "
                "epochs over; set max_steps"
            )
    if config.max_steps is None and epochs is None:
        config.max_steps = 1  # the documented default when neither is set


LLM_JUDGE_WORKER = "roll.workers.rewards.llm_judge.LLMJudgeRewardWorker"


def check_model_types(config) -> None:
    for name, worker in roles(config).items():
        kind = worker.model_args.model_type if worker.model_args is not None else None
        where = f"'{name}.model_args.model_type' = {kind!r}"
        if kind == "auto_sequence_classification":
            raise ConfigError(f"{where}: roll has no classifier reward-model worker; score with a rule or an LLM judge")
        if kind == "auto_token_classification" and name != "critic":
            raise ConfigError(f"{where}: only the critic builds a token-classification (value) model")
        judge = getattr(worker, "worker_cls", None) == LLM_JUDGE_WORKER
        if kind == "trl" and not (judge and getattr(worker, "judge_model_type", None) == "inference"):
            raise ConfigError(
                f"{where}: only an LLM judge that generates (rewards.<domain> with the LLM-judge worker, "
                "judge_model_type: inference) takes trl; model roles are causal LMs (model_type: null)"
            )


def check_roles(config) -> None:
    if getattr(config, "rollout_only", False):  # agentic, no actor_train: ROLL's AgenticRolloutPipeline
        pass
    elif config.actor_train is None or config.actor_infer is None:
        raise ConfigError(
            "a pipeline config needs both 'actor_train' (the trainer) and 'actor_infer' (the rollout engine)"
        )
    if hasattr(config, "rewards") and not config.rewards:
        raise ConfigError(
            "'rewards' is empty: add at least one domain, e.g. rewards.math with worker_cls "
            "roll.workers.rewards.math_rule.MathRuleRewardWorker"
        )
    if config.num_nodes is None:  # derived from the mappings, as ROLL does
        ids = [d for worker in roles(config).values() for d in worker.device_mapping or []]
        config.num_nodes = max(1, -(-(max(ids, default=0) + 1) // config.num_gpus_per_node))
    problems = []  # every role's mistakes at once (a misspelled strategy in three roles names all three)
    for name, worker in roles(config).items():
        try:
            _check_worker(name, worker, config.num_devices, config.num_gpus_per_node)
        except ConfigError as error:
            problems.extend((key or f"{name}.", message) for key, message in error.problems)
    if problems:
        raise collected(problems)
    check_lora_weight_sync(config)


def check_lora_weight_sync(config) -> None:
    """lora_weight_sync: adapter needs a LoRA actor and a rollout engine that serves adapters, set up for them."""
    if getattr(config, "lora_weight_sync", "merged") != "adapter":
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
            f"one of {strategies_with('lora_adapters', role='actor_infer')} or lora_weight_sync: merged"
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


def _check_worker(name: str, worker, num_devices: int, num_gpus_per_node: int) -> None:
    is_reward = name.startswith("rewards.")
    if worker.worker_cls is None:
        if is_reward:
            raise ConfigError(
                f"'{name}.worker_cls' is required: the dotted path of a RewardWorker subclass, "
                f"e.g. roll.workers.rewards.math_rule.MathRuleRewardWorker"
            )
        worker.worker_cls = DEFAULT_WORKERS[name]
    if "." not in worker.worker_cls:
        raise ConfigError(
            f"'{name}.worker_cls' = {worker.worker_cls!r}: expected a dotted path such as 'my_package.rewards.MyReward'"
        )
    if not is_reward:
        if worker.model_args is None:
            raise ConfigError(f"'{name}.model_args.model_name_or_path' is required")
        allowed = strategies_with(role=name)
        if worker.strategy_args is None:
            raise ConfigError(
                f"'{name}.strategy_args.strategy_name' is required; for this role choose one of {allowed}"
            )
        strategy = worker.strategy_args.strategy_name
        if strategy not in allowed:
            raise ConfigError(
                f"'{name}.strategy_args.strategy_name' = {strategy!r} cannot serve this role; "
                f"choose one of {allowed}{closest(strategy, allowed)}"
            )
        check_lora(name, worker)
        check_freeze(name, worker)
        check_ulysses(name, worker)
    mapping = worker.device_mapping
    if mapping:
        if len(set(mapping)) != len(mapping):
            raise ConfigError(f"'{name}.device_mapping' = {describe_ids(mapping)} repeats a device id")
        bad = [d for d in mapping if not 0 <= d < num_devices]
        if bad:
            raise ConfigError(
                f"'{name}.device_mapping' uses device ids {describe_ids(bad)}, but num_nodes × num_gpus_per_node = "
                f"{num_devices} devices (ids 0..{num_devices - 1}); shorten the mapping or raise "
                f"num_gpus_per_node / num_nodes"
            )
        if len(mapping) % worker.num_gpus_per_worker:
            raise ConfigError(
                f"'{name}.device_mapping' has {len(mapping)} ids, not a multiple of "
                f"'{name}.num_gpus_per_worker' = {worker.num_gpus_per_worker}"
            )
        derived = len(mapping) // worker.num_gpus_per_worker
        k = worker.num_gpus_per_worker
        for rank in range(derived):  # a worker is one process: its devices are on one node
            devices = mapping[rank * k : (rank + 1) * k]
            nodes = sorted({d // num_gpus_per_node for d in devices})
            if len(nodes) > 1:
                raise ConfigError(
                    f"'{name}' rank {rank} gets device ids {devices}, which are on nodes {nodes} (device id d is "
                    f"on node d // num_gpus_per_node = d // {num_gpus_per_node}); one worker's devices must be on "
                    f"one node: align '{name}.device_mapping' with num_gpus_per_node or lower num_gpus_per_worker"
                )
        if worker.world_size is not None and worker.world_size != derived:
            raise ConfigError(
                f"'{name}.world_size' = {worker.world_size} but device_mapping / num_gpus_per_worker "
                f"= {derived}; remove world_size (it is derived) or fix the mapping"
            )
        worker.world_size = derived
    else:
        if not is_reward:
            raise ConfigError(
                f"'{name}.device_mapping' is required: the device ids of this role's workers, "
                f"e.g. device_mapping: list(range(0, 1)) (virtual devices on a CPU-only machine)"
            )
        worker.world_size = worker.world_size or 1
    if worker.world_size < 1:
        raise ConfigError(f"'{name}.world_size' = {worker.world_size}: must be ≥ 1")


def check_freeze(name: str, worker) -> None:
    """model_args.freeze_module_prefix: a training role needs a strategy that applies it (a role that only scores
    or generates takes no gradient, so freezing changes nothing there, as in ROLL)."""
    strategy_cls = _strategy_of(worker)
    trains = strategy_cls is not None and {"train", "critic"} & set(strategy_cls.roles)
    if worker.model_args.frozen_prefixes and trains and not strategy_cls.freeze_module_prefix:
        raise ConfigError(
            f"'{name}.model_args.freeze_module_prefix' is set but strategy {worker.strategy_args.strategy_name!r} "
            f"does not freeze parameters by name; use one of {strategies_with('freeze_module_prefix', role=name)} "
            "or remove it"
        )


def check_ulysses(name: str, worker) -> None:
    """model_args.ulysses_size > 1: a strategy that builds it (class attribute `ulysses`)."""
    from roll.strategies.ulysses import ulysses_size_of

    try:
        size = ulysses_size_of(worker.model_args)
    except ValueError as error:
        raise ConfigError(f"{name}: {error}") from None
    strategy_cls = _strategy_of(worker)
    if size == 1 or strategy_cls is None:
        return
    if not strategy_cls.ulysses:
        raise ConfigError(
            f"'{name}.model_args.ulysses_size' = {size}: strategy {worker.strategy_args.strategy_name!r} has no "
            f"Ulysses sequence parallelism; use one of {strategies_with('ulysses', role=name)} or set it to 1"
        )


LORA_ROLES = ("actor_train",)  # the trained policy; the other roles get its merged weights or the frozen base


def check_lora(name: str, worker) -> None:
    """model_args.lora_*: valid values, a role that trains a policy, and a strategy whose class has `lora`."""
    import re

    args = worker.model_args
    path = f"{name}.model_args"
    if not args.lora:
        changed = [
            key
            for key, default in (("lora_rank", 8), ("lora_alpha", None), ("lora_dropout", 0.0))
            if getattr(args, key) != default
        ]
        if changed:
            raise ConfigError(
                f"'{path}.{changed[0]}' is only read with LoRA on: set '{path}.lora_target' (e.g. all-linear) "
                f"or '{path}.adapter_name_or_path', or remove {changed}"
            )
        return
    if name not in LORA_ROLES:
        raise ConfigError(
            f"'{path}.lora_target' / adapter_name_or_path: LoRA is trained by actor_train only; {name} gets the "
            f"merged weights (actor_infer) or is the frozen base (reference): remove the lora_* keys here"
        )
    strategy = worker.strategy_args.strategy_name
    strategy_cls = _strategy_of(worker)
    if strategy_cls is not None and not strategy_cls.lora:
        reason = f" ({strategy_cls.lora_limit})" if strategy_cls.lora_limit else ""
        raise ConfigError(
            f"'{path}.lora_target' is set but strategy {strategy!r} has no LoRA{reason}; use one of "
            f"{strategies_with('lora', role=name)} or remove the lora_* keys (full fine-tuning)"
        )
    if strategy_cls is not None:
        try:
            strategy_cls.check_lora(args, worker.strategy_args.strategy_config)
        except ValueError as error:
            raise ConfigError(f"'{path}' with strategy {strategy!r}: {error}") from None
    if args.lora_target is not None:
        target = args.lora_target.strip()
        if not target or (not is_regex(target) and not [t for t in target.split(",") if t.strip()]):
            raise ConfigError(
                f"'{path}.lora_target' = {args.lora_target!r}: expected 'all-linear', module names separated by "
                f"commas (e.g. q_proj,v_proj) or a regex over full module names"
            )
        if is_regex(target):
            try:
                re.compile(target)
            except re.error as error:
                raise ConfigError(
                    f"'{path}.lora_target' = {args.lora_target!r} is not a valid regex: {error}"
                ) from None
    if args.adapter_name_or_path is not None:
        from pathlib import Path

        if not (Path(args.adapter_name_or_path) / "adapter_config.json").is_file():
            raise ConfigError(
                f"'{path}.adapter_name_or_path' = {args.adapter_name_or_path!r}: no adapter_config.json there "
                f"(expected a peft adapter folder, e.g. a checkpoint's actor_train/adapter)"
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

    for key, lookup in (("adv_estimator", get_adv_estimator_fn), ("policy_loss_mode", get_policy_loss_fn)):
        try:
            lookup(getattr(config, key))
        except (KeyError, ValueError) as error:
            raise ConfigError(f"'{key}' = {getattr(config, key)!r}: {error}") from None
    mode = effective_policy_loss_mode(config)
    if getattr(config, "ratio_type", "token") == "segment":  # agentic only
        if config.importance_sampling == "seq":
            raise ConfigError(
                "'ratio_type' = segment and 'importance_sampling' = seq both set the PPO ratio's level; keep one"
            )
        if mode != "vanilla":
            raise ConfigError(
                f"'ratio_type' = segment applies to the PPO loss (policy_loss_mode: vanilla / pg_variant: ppo), "
                f"but the loss is {mode!r}; set ratio_type: token or use the PPO loss"
            )
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
    sum_pi_squared = strategies_with("sum_pi_squared", role="actor_train")
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
            strategies_with("rollout_log_probs", role="actor_infer"),
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
        rollout_log_probs = strategies_with("rollout_log_probs", role="actor_infer")
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


def check_micro_batching(config) -> None:
    """Dynamic batching and sequence packing keys: only where a strategy reads them (its capability flags),
    with a token budget that fits the longest possible row (prompt_length + response_length)."""
    longest = config.prompt_length + config.response_length
    for name, worker in roles(config).items():
        strategy = worker.strategy_args.strategy_name if worker.strategy_args else None
        strategy_cls = _strategy_of(worker)
        for phase in ("train", "infer"):
            enabled, budget_key = f"use_dynamic_batching_in_{phase}", f"max_tokens_per_microbatch_in_{phase}"
            budget = getattr(worker, budget_key)
            if not getattr(worker, enabled):
                if budget is not None:
                    raise ConfigError(
                        f"'{name}.{budget_key}' = {budget} is only read with '{name}.{enabled}: true'; "
                        f"turn that on or remove the budget"
                    )
                continue
            # only the trained roles run train steps
            trains = phase == "infer" or name in ("actor_train", "critic")
            strategies = strategies_with(f"dynamic_batching_{phase}") if trains else []
            if strategy not in strategies:
                raise ConfigError(
                    f"'{name}.{enabled}' is not supported for role {name} with strategy {strategy!r}; "
                    f"supported: {strategies} (docs/strategies.md)"
                )
            if budget is None or budget < longest:
                raise ConfigError(
                    f"'{name}.{budget_key}' = {budget}: must be ≥ prompt_length + response_length = "
                    f"{longest} (the longest possible row)"
                )
            reason = strategy_cls.dynamic_batching_limit(worker.strategy_args.strategy_config)
            if reason:
                raise ConfigError(f"'{name}.{enabled}' with {strategy}: {reason}")
        packing = strategies_with("sequence_packing")
        if worker.use_sequence_packing and strategy not in packing:
            raise ConfigError(
                f"'{name}.use_sequence_packing' is not supported with strategy {strategy!r} yet; "
                f"supported: {packing}; set it to false"
            )
        if worker.use_sequence_packing and strategy_cls is not None:
            # packed rows vary in length like token-budget micro-batches: the same strategy_config limits
            reason = strategy_cls.dynamic_batching_limit(worker.strategy_args.strategy_config)
            if reason:
                raise ConfigError(f"'{name}.use_sequence_packing' with {strategy}: {reason}")


def check_strategy_configs(config) -> None:
    """Each role's strategy_config through its engine's own check (the strategy class's
    `check_strategy_config`, found through the registry), at load time and by --dry_run; every problem raised
    together."""
    from roll.strategies import strategy_class

    problems = []
    for worker in roles(config).values():
        args = worker.strategy_args
        if args is None:
            continue
        dtype = worker.model_args.dtype if worker.model_args else "float32"
        mapping = worker.device_mapping
        world = worker.world_size or (len(mapping) // worker.num_gpus_per_worker if mapping else 1)
        try:
            strategy_class(args.strategy_name).check_strategy_config(
                args.strategy_config, dtype=dtype, world_size=world
            )
        except ValueError as error:
            problems.append((f"{worker.name}.strategy_args.strategy_config", f"{worker.name}: {error}"))
    problems += vision_language_problems(config)
    if problems:
        raise collected(problems)


def vision_language_problems(config) -> list[tuple[str, str]]:
    """(key, message) for each role whose model folder holds a vision-language model (roll/models/vl.py) its
    strategy cannot run (the class's `vision_language`, with its `vision_language_limit`), or in a way not built
    (a critic, Ulysses). Folders that are not on disk yet (a hub name) are not read."""
    from roll.models.vl import ULYSSES_VL_LIMIT, vl_model_type
    from roll.strategies import strategy_class
    from roll.utils.errors import InputError

    problems = []
    for name, worker in roles(config).items():
        if worker.model_args is None or worker.strategy_args is None:
            continue
        key = f"{name}.model_args.model_name_or_path"
        try:
            family = vl_model_type(worker.model_args.model_name_or_path)
        except InputError as error:  # a VL family roll does not build
            problems.append((key, f"{name}: {error}"))
            continue
        if family is None:
            continue
        strategy = worker.strategy_args.strategy_name
        cls = strategy_class(strategy)
        if not cls.vision_language:
            reason = cls.vision_language_limit or "not built for this engine"
            message = f"{name}: {strategy} cannot run {family}: {reason}"
            problems.append((f"{name}.strategy_args.strategy_name", message))
        if name == "critic":
            problems.append((key, f"critic: a value model of the vision-language {family} is not built"))
        if (worker.model_args.ulysses_size or 1) > 1:
            problems.append((f"{name}.model_args.ulysses_size", f"{name}: {ULYSSES_VL_LIMIT}"))
    return problems
