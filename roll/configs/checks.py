"""The config rules every pipeline kind shares: its roles' worker classes, strategies, devices, LoRA, freezing,
Ulysses, micro-batching and engine keys, and the run length. A role's needs come from its kind's `RoleSpec`
(roll/configs/roles.py), never from a list of role names here.

Derived quantities (world sizes, num_nodes) are filled here and printed at start-up; an inconsistent combination
is an error that names the keys to change. User values are never rewritten: only fields left null are filled, and
the report says what they became.
"""

from roll.configs.loader import ConfigError, closest, collected, describe_ids
from roll.utils.patterns import is_regex


def roles(config) -> dict:
    """name → WorkerConfig of every configured role (the kind's model roles, then its extra roles)."""
    return config.roles()


def strategies_with(flag: str | None = None, capability: str | None = None) -> list[str]:
    """Registered strategy names, in registry order, whose class sets the capability `flag` (a class
    attribute of roll/strategies/base.py's InferenceStrategy) and serves `capability` (a RoleSpec's: train,
    critic, generate, score)."""
    from roll.strategies import strategy_class, strategy_names

    out = []
    for name in strategy_names():
        cls = strategy_class(name)
        if (flag is None or getattr(cls, flag)) and (capability is None or capability in cls.roles):
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
    """max_steps, or the kind's EPOCHS_ROLE's num_train_epochs; no other role's epochs mean anything."""
    epochs_role = config.EPOCHS_ROLE
    for name, worker in roles(config).items():
        if name != epochs_role and worker.training_args.num_train_epochs is not None:
            if epochs_role is None:
                raise ConfigError(
                    f"'{name}.training_args.num_train_epochs': the {config.KIND} pipeline has no prompt dataset to "
                    "count epochs over; set max_steps"
                )
            raise ConfigError(f"'{name}.training_args.num_train_epochs': only {epochs_role}'s sets the run length")
    worker = getattr(config, epochs_role) if epochs_role is not None else None
    epochs = worker.training_args.num_train_epochs if worker is not None else None
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
    """Every configured role: worker class (the RoleSpec's default when unset), model, strategy (one that serves
    the role's capability), devices; num_nodes derived from the device mappings when unset."""
    if config.num_nodes is None:  # derived from the mappings, as ROLL does
        ids = [d for worker in roles(config).values() for d in worker.device_mapping or []]
        config.num_nodes = max(1, -(-(max(ids, default=0) + 1) // config.num_gpus_per_node))
    specs = config.model_role_specs()
    lora_roles = [spec.name for spec in config.ROLES if spec.lora]
    problems = []  # every role's mistakes at once (a misspelled strategy in three roles names all three)
    for name, worker in roles(config).items():
        try:
            _check_worker(name, worker, specs.get(name), lora_roles, config.num_devices, config.num_gpus_per_node)
        except ConfigError as error:
            problems.extend((key or f"{name}.", message) for key, message in error.problems)
    if problems:
        raise collected(problems)


def _check_worker(name: str, worker, spec, lora_roles: list, num_devices: int, num_gpus_per_node: int) -> None:
    """`spec`: the role's RoleSpec, None for an extra role (a reward scorer: its worker class is required, it
    has no model the pipeline manages)."""
    is_reward = spec is None
    if worker.worker_cls is None:
        if is_reward:
            raise ConfigError(
                f"'{name}.worker_cls' is required: the dotted path of a RewardWorker subclass, "
                f"e.g. roll.workers.rewards.math_rule.MathRuleRewardWorker"
            )
        worker.worker_cls = spec.worker_cls
    if "." not in worker.worker_cls:
        raise ConfigError(
            f"'{name}.worker_cls' = {worker.worker_cls!r}: expected a dotted path such as 'my_package.rewards.MyReward'"
        )
    if not is_reward:
        if worker.model_args is None:
            raise ConfigError(f"'{name}.model_args.model_name_or_path' is required")
        allowed = strategies_with(capability=spec.capability)
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
        check_lora(name, worker, spec, lora_roles)
        check_freeze(name, worker, spec)
        check_ulysses(name, worker, spec)
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


def check_freeze(name: str, worker, spec) -> None:
    """model_args.freeze_module_prefix: a training role needs a strategy that applies it (a role that only scores
    or generates takes no gradient, so freezing changes nothing there, as in ROLL)."""
    strategy_cls = _strategy_of(worker)
    trains = strategy_cls is not None and {"train", "critic"} & set(strategy_cls.roles)
    if worker.model_args.frozen_prefixes and trains and not strategy_cls.freeze_module_prefix:
        raise ConfigError(
            f"'{name}.model_args.freeze_module_prefix' is set but strategy {worker.strategy_args.strategy_name!r} "
            f"does not freeze parameters by name; use one of "
            f"{strategies_with('freeze_module_prefix', spec.capability)} or remove it"
        )


def check_ulysses(name: str, worker, spec) -> None:
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
            f"Ulysses sequence parallelism; use one of {strategies_with('ulysses', spec.capability)} or set it to 1"
        )


def check_lora(name: str, worker, spec, lora_roles: list) -> None:
    """model_args.lora_*: valid values, a role that trains a policy (RoleSpec.lora: the other roles get its merged
    weights or are frozen models), and a strategy whose class has `lora`."""
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
    if not spec.lora:
        raise ConfigError(
            f"'{path}.lora_target' / adapter_name_or_path: LoRA is trained by {' / '.join(lora_roles)} only; {name} "
            f"trains no adapters (it gets the trained weights, merged, or is a frozen model): remove the lora_* keys "
            f"here"
        )
    strategy = worker.strategy_args.strategy_name
    strategy_cls = _strategy_of(worker)
    if strategy_cls is not None and not strategy_cls.lora:
        reason = f" ({strategy_cls.lora_limit})" if strategy_cls.lora_limit else ""
        raise ConfigError(
            f"'{path}.lora_target' is set but strategy {strategy!r} has no LoRA{reason}; use one of "
            f"{strategies_with('lora', spec.capability)} or remove the lora_* keys (full fine-tuning)"
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


def check_micro_batching(config) -> None:
    """Dynamic batching and sequence packing keys: only where a strategy reads them (its capability flags),
    with a token budget that fits the longest possible row (the kind's `longest_row`)."""
    longest, how = config.longest_row()
    specs = config.model_role_specs()
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
            trains = phase == "infer" or (name in specs and specs[name].trained)
            strategies = strategies_with(f"dynamic_batching_{phase}") if trains else []
            if strategy not in strategies:
                raise ConfigError(
                    f"'{name}.{enabled}' is not supported for role {name} with strategy {strategy!r}; "
                    f"supported: {strategies} (docs/strategies.md)"
                )
            if budget is None or budget < longest:
                raise ConfigError(
                    f"'{name}.{budget_key}' = {budget}: must be ≥ {how} = {longest} (the longest possible row)"
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
