"""ROLL spellings → roll's, applied to the resolved plain dict before strict loading.

`translate(data)` rewrites every alias of roll.configs.roll_keys in place and returns the problems
(refused keys, bad alias values) as (key path, message) pairs, so the loader reports them
together with its own unknown keys and wrong types. `python -m roll.configs.roll_compat` prints
docs/roll_compatibility.md.
"""

import dataclasses
import importlib.util
import posixpath

from roll.configs.roll_keys import (
    DTYPES,
    REFUSED,
    ROLL_ACTOR_WORKERS,
    ROLL_KEYS,
    ROLL_REWARD_PREFIX,
    ROLL_REWARD_WORKERS,
)

SUB_BLOCKS = ("model_args", "data_args", "generating_args", "training_args")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def translate(data: dict) -> list:
    problems: list = []
    _apply_block(data, "", "", problems)
    if isinstance(data.get("actor_train"), dict):
        _apply_block(data["actor_train"], "actor_train", "actor_train", problems, top=data)
    for role in ("actor_train", "actor_infer", "reference", "critic"):
        if isinstance(data.get(role), dict):
            _apply_block(data[role], "<role>", role, problems)
    _drop_lora_copies(data)
    for tag, env in (data.get("custom_envs") or {}).items():
        if isinstance(env, dict):
            _apply_block(env, "custom_envs", f"custom_envs.{tag}", problems)
            _lift_env_settings(env, f"custom_envs.{tag}", problems)
    if isinstance(data.get("reward_normalization"), dict):
        _apply_block(data["reward_normalization"], "reward_normalization", "reward_normalization", problems)
    _walk(data, "", problems)
    for domain, reward in (data.get("rewards") or {}).items():
        if isinstance(reward, dict) and isinstance(reward.get("worker_cls"), str):
            original = reward["worker_cls"]
            _reward_worker(reward, f"rewards.{domain}.worker_cls", problems)
            if reward["worker_cls"] != original:  # ROLL's path was given: --dry_run shows the mapping
                data.setdefault("__roll__", {}).setdefault("reward_worker_cls", {})[domain] = original
    return problems


LORA_KEYS = ("lora_target", "lora_rank", "lora_alpha", "lora_dropout")


def _drop_lora_copies(data: dict) -> None:
    """ROLL repeats actor_train's lora keys on actor_infer / reference (${lora_rank}); equal copies are dropped,
    different ones are left for the LoRA check to refuse."""
    train = data.get("actor_train")
    train = (train.get("model_args") or {}) if isinstance(train, dict) else {}
    for role in ("actor_infer", "reference"):
        block = data.get(role)
        args = block.get("model_args") if isinstance(block, dict) else None
        given = [key for key in LORA_KEYS if isinstance(args, dict) and key in args]
        if given and all(args[key] == train.get(key) for key in given):
            for key in given:
                del args[key]


ENV_SETTINGS = ("action_pattern", "format_penalty", "env_instruction")


def _lift_env_settings(env: dict, path: str, problems: list) -> None:
    """ROLL's env_config.action_pattern / format_penalty / env_instruction: roll's env manager reads them, one
    level up."""
    settings = env.get("env_config")
    if not isinstance(settings, dict):
        return
    for key in ENV_SETTINGS:
        if key in settings:
            value = settings.pop(key)
            if env.setdefault(key, value) != value:
                problems.append((f"{path}.env_config.{key}", f"'{path}.env_config.{key}' = {value!r} conflicts "
                                 f"with '{path}.{key}' = {env[key]!r}: set only one"))  # fmt: skip


def _walk(node: dict, path: str, problems: list) -> None:
    for key, value in node.items():
        if not isinstance(value, dict):
            continue
        if key in SUB_BLOCKS:
            _apply_block(value, key, _join(path, key), problems)
        elif key not in ("strategy_args", "env_config", "reward_args", "system_envs", "custom_envs"):
            _walk(value, _join(path, key), problems)


def _apply_block(block: dict, name: str, path: str, problems: list, top: dict | None = None) -> None:
    for entry in ROLL_KEYS:
        if entry.block != name or entry.key not in block:
            continue
        key_path = _join(path, entry.key)
        if entry.status == REFUSED:
            del block[entry.key]
            problems.append((key_path, f"'{key_path}' is refused: {entry.note}"))
        else:
            alias = _ALIASES[(name, entry.key)]
            value = block.pop(entry.key)
            message = alias(block, value, key_path, top) if top is not None else alias(block, value, key_path)
            if message:
                problems.append((key_path, message))


def _dtype(block, value, path):
    if value in DTYPES or value in DTYPES.values():
        block["dtype"] = DTYPES.get(value, value)
        return None
    return f"'{path}' = {value!r} is not allowed; choose one of {sorted(DTYPES)} (or {sorted(DTYPES.values())})"


def _column(ours):
    def rename(block, value, path):
        if ours in block and block[ours] != value:
            return f"'{path}' = {value!r} conflicts with '{ours}' = {block[ours]!r}: set only one"
        block[ours] = value
        return None

    return rename


ROLL_TEMPLATES = {"native": None, "qwen2_5": None, "qwen3": "qwen3", "chatml": "chatml"}


def _template(block, value, path):
    if value not in ROLL_TEMPLATES:
        return (
            f"'{path}' = {value!r} is not offered: valid {sorted(ROLL_TEMPLATES)} (ROLL's base, empty, "
            "longCOT_qwen2.5 and longcot_V3 rewrite the prompt text; put that text in the data instead)"
        )
    if block.get("apply_chat_template") is False:
        return f"'{path}' = {value!r} conflicts with 'apply_chat_template' = false"
    name = ROLL_TEMPLATES[value]
    if "chat_template" in block and block["chat_template"] != name:
        return f"'{path}' = {value!r} conflicts with 'chat_template' = {block['chat_template']!r}: set only one"
    block["apply_chat_template"] = True
    if name is not None:
        block["chat_template"] = name
    return None


def _dataset_dir(block, value, path):
    if not isinstance(value, str):
        return f"'{path}' = {value!r}: expected a directory path"
    files = block.get("file_name")
    if isinstance(files, str):
        block["file_name"] = posixpath.join(value, files)
    elif isinstance(files, list):
        block["file_name"] = [posixpath.join(value, f) if isinstance(f, str) else f for f in files]
    return None


def _num_beams(block, value, path):
    if value == 1 and not isinstance(value, bool):
        return None
    return f"'{path}' = {value!r} is refused: {_note('generating_args', 'num_beams')}"


def _drop(block, value, path):
    return None


def _checked_later(key):
    def keep(block, value, path):
        block.setdefault("__roll__", {})[key] = value  # checked against the built config by check_roll_keys
        return None

    return keep


def _checkpoint_config(block, value, path):
    if not isinstance(value, dict):
        return f"'{path}' = {value!r}: expected a mapping with type and output_dir"
    unknown = sorted(set(value) - {"type", "output_dir"})
    problems = [f"unknown key '{path}.{k}' (valid: output_dir, type)" for k in unknown]
    if value.get("type", "file_system") != "file_system":
        problems.append(f"'{path}.type' = {value['type']!r}: only 'file_system' is supported")
    out = value.get("output_dir")
    if out is not None:
        if block.get("checkpoint_dir", out) != out:
            problems.append(
                f"'{path}.output_dir' = {out!r} differs from 'checkpoint_dir' = {block['checkpoint_dir']!r}: set one"
            )
        block["checkpoint_dir"] = out
    return "; ".join(problems) or None


def _inert(allowed, block_name=""):
    """A key whose only value roll can honour is a no-op (ROLL never reads it, or it is ROLL's default): that
    value is dropped, any other refused."""

    def check(block, value, path):
        if any(value is a or (value == a and type(value) is type(a)) for a in allowed):
            return None
        return f"'{path}' = {value!r} is refused: {_note(block_name, path.rpartition('.')[2])}"

    return check


def _num_return_sequences_expand(block, value, path):
    return None if isinstance(value, bool) else f"'{path}' = {value!r}: expected true or false"


ENGINE_CONCURRENCY = {"vllm": "max_num_seqs", "sglang": "max_running_requests"}


def _max_running_requests(block, value, path):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"'{path}' = {value!r}: expected a positive integer"
    infer = block.get("actor_infer")
    args = infer.get("strategy_args") if isinstance(infer, dict) else None
    name = args.get("strategy_name") if isinstance(args, dict) else None
    if name not in ENGINE_CONCURRENCY:
        return f"'{path}' is refused for actor_infer strategy {name!r}: {_note('', path)}"
    engine = args["strategy_config"] = args.get("strategy_config") or {}
    key = ENGINE_CONCURRENCY[name]
    if key in engine and engine[key] != value:
        return (
            f"'{path}' = {value} conflicts with actor_infer.strategy_args.strategy_config.{key} = {engine[key]!r}: "
            "set only one"
        )
    engine[key] = value
    return None


def _set_in_roles(top: dict, roles, sub: str, key: str, value, path: str, keep_set: bool = False):
    """Each role's <sub>.<key> = value where unset; a role that sets another value is a conflict (or, with
    keep_set, keeps its own)."""
    problems = []
    for role in roles:
        if isinstance(top.get(role), dict):
            args = top[role][sub] = top[role].get(sub) or {}
            if args.setdefault(key, value) != value and not keep_set:
                problems.append(
                    f"'{path}' = {value!r} conflicts with '{role}.{sub}.{key}' = {args[key]!r}: set only one"
                )
    return "; ".join(problems) or None


def _model_path(roles):
    def fill(block, value, path):  # ROLL overwrites all three when one is unset; roll fills only the unset ones
        return _set_in_roles(block, roles, "model_args", "model_name_or_path", value, path, keep_set=True)

    return fill


def _global_template(block, value, path):
    return _set_in_roles(block, ("actor_train", "validation"), "data_args", "template", value, path)


def _max_grad_norm(block, value, path):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return f"'{path}' = {value!r}: expected a positive number"
    return _set_in_roles(block, ("actor_train", "critic"), "training_args", "max_grad_norm", value, path)


ROLL_ENV_MANAGERS = {
    "roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager": "traj",
    "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager": "step",
}


def _env_manager_cls(block, value, path):
    ours = ROLL_ENV_MANAGERS.get(value)
    if ours is None:
        return f"'{path}' = {value!r} is refused: {_note('custom_envs', 'env_manager_cls')}"
    if block.setdefault("env_manager", ours) != ours:
        return f"'{path}' = {value!r} conflicts with 'env_manager' = {block['env_manager']!r}: set only one"
    return None


def _positive_int_no_effect(block, value, path):
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return None if ok else f"'{path}' = {value!r}: expected a positive integer"


def _thread_lock(block, value, path):
    return None if isinstance(value, bool) else f"'{path}' = {value!r}: expected true or false"


def _normalization_method(block, value, path):
    scope = "batch" if block.get("grouping") == "batch" else "group"
    derived = {"identity": (None, None), "mean": (scope, None), "mean_std": (scope, scope), "asym_clip": (scope, scope)}
    if value not in derived:
        return f"'{path}' = {value!r}: valid {sorted(derived)} (or set norm_mean_type / norm_std_type)"
    problems = []
    for key, wanted in zip(("norm_mean_type", "norm_std_type"), derived[value]):
        if block.setdefault(key, wanted) != wanted:
            problems.append(f"'{path}' = {value!r} means {key}: {wanted}, but {key} is {block[key]!r}")
    return "; ".join(problems) or None


def _to_top(key):
    def move(block, value, path, top):
        if key in top and top[key] != value:
            return f"'{path}' = {value!r} conflicts with top-level '{key}' = {top[key]!r}: set only one"
        top[key] = value
        return None

    return move


def _actor_worker_cls(block, value, path, top):
    if value in ROLL_ACTOR_WORKERS:
        return None  # roll's default ActorWorker runs every pg_variant
    if isinstance(value, str) and value.startswith("roll.pipeline."):
        return f"'{path}' = {value!r}: no roll counterpart; ROLL's actor workers map to roll's: {ROLL_ACTOR_WORKERS}"
    block["worker_cls"] = value  # a roll class path or null: roll's own key
    return None


_ALIASES = {
    **{("actor_train", key): _to_top(key) for key in ("pg_variant", "topr_positive_weight", "topr_negative_weight")},
    ("actor_train", "worker_cls"): _actor_worker_cls,
    ("", "hydra"): _drop,
    ("", "pretrain"): _model_path(("actor_train", "actor_infer", "reference")),
    ("", "reward_pretrain"): _model_path(("critic",)),
    ("", "sequence_length"): _checked_later("sequence_length"),
    ("", "val_prompt_length"): _checked_later("val_prompt_length"),
    ("", "checkpoint_config"): _checkpoint_config,
    ("", "max_grad_norm"): _max_grad_norm,
    ("", "global_template"): _global_template,
    ("model_args", "ulysses_size"): _inert((1, None), "model_args"),
    **{
        ("<role>", key): _positive_int_no_effect
        for key in ("sequence_length_round_in_train", "sequence_length_round_in_infer")
    },
    ("", "render_save_dir"): _drop,
    ("", "batch_adjust_mode"): _inert(("copy", "auto")),
    **{
        ("", key): _drop
        for key in ("all_response_pattern", "single_prompt_agent_system_template", "single_prompt_agent_template")
    },
    ("custom_envs", "max_steps"): _column("max_turns"),
    ("custom_envs", "env_manager_cls"): _env_manager_cls,
    ("custom_envs", "agent_runner_cls"): _inert((None,), "custom_envs"),
    ("custom_envs", "use_thread_lock"): _thread_lock,
    ("reward_normalization", "method"): _normalization_method,
    ("", "is_num_return_sequences_expand"): _num_return_sequences_expand,
    ("", "max_running_requests"): _max_running_requests,
    **{("", key): _inert((None, "None")) for key in ("reward_norm",)},
    **{
        ("", key): _inert((False,))
        for key in ("reward_shift", "reward_scale", "use_reward_norm", "add_len_reward", "use_topr_loss")
    },
    ("model_args", "dtype"): _dtype,
    ("data_args", "prompt"): _column("prompt_key"),
    ("data_args", "messages"): _column("messages_key"),
    ("data_args", "tag"): _column("tag_key"),
    ("data_args", "template"): _template,
    ("data_args", "dataset_dir"): _dataset_dir,
    ("generating_args", "num_beams"): _num_beams,
}


def _note(block: str, key: str) -> str:
    return next(e.note for e in ROLL_KEYS if (e.block, e.key) == (block, key))


def _reward_worker(reward: dict, path: str, problems: list) -> None:
    name = reward["worker_cls"]
    if not name.startswith(ROLL_REWARD_PREFIX):
        return
    target = ROLL_REWARD_WORKERS.get(name)
    if target is None:
        problems.append(
            (
                path,
                f"'{path}' = {name!r}: no roll counterpart of this ROLL reward worker; "
                f"known: {sorted(ROLL_REWARD_WORKERS)}",
            )
        )
    elif importlib.util.find_spec(target.rpartition(".")[0]) is None:
        problems.append(
            (path, f"'{path}' = {name!r} is not supported yet: its roll counterpart {target} does not exist yet")
        )
    else:
        reward["worker_cls"] = target


def check_roll_keys(config, extra: dict) -> list:
    """Checks of aliases that need the built config (lengths); (key path, message) pairs."""
    problems = []
    budget = config.prompt_length + config.response_length
    if "sequence_length" in extra and not extra["sequence_length"] >= budget:
        problems.append(
            (
                "sequence_length",
                f"'sequence_length' = {extra['sequence_length']!r} < prompt_length + response_length = {budget}",
            )
        )
    if "val_prompt_length" in extra and extra["val_prompt_length"] != config.prompt_length:
        problems.append(
            (
                "val_prompt_length",
                f"'val_prompt_length' = {extra['val_prompt_length']!r}: roll validates with prompt_length = "
                f"{config.prompt_length}; set them equal",
            )
        )
    return problems


def check_strategy_configs(config) -> list:
    """Each role's strategy_config through its engine's own validator (run by --dry_run, not only at start)."""
    from roll.configs.checks import roles

    problems = []
    for worker in roles(config).values():
        args = worker.strategy_args
        if args is None:
            continue
        try:
            _validate_engine(args.strategy_name, args.strategy_config, worker)
        except ValueError as error:
            problems.append((f"{worker.name}.strategy_args.strategy_config", f"{worker.name}: {error}"))
    return problems


def _validate_engine(name: str, strategy_config, worker) -> None:
    dtype = worker.model_args.dtype if worker.model_args else "float32"
    mapping = worker.device_mapping
    world = worker.world_size or (len(mapping) // worker.num_gpus_per_worker if mapping else 1)
    if name == "vllm":
        from roll.strategies.vllm_infer import validate_strategy_config

        validate_strategy_config(strategy_config, on_cpu=False)
    elif name == "sglang":
        from roll.strategies.sglang_infer import validate_strategy_config

        validate_strategy_config(strategy_config, dtype)
    elif name in ("megatron_train", "megatron_infer"):
        from roll.strategies.megatron_train import resolve_megatron_config

        resolve_megatron_config(strategy_config, world, dtype)
    elif name in ("fsdp2_train", "fsdp2_infer"):
        from roll.strategies.fsdp2_train import resolve_fsdp2_config

        resolve_fsdp2_config(strategy_config, dtype, world)


def note_roll_spellings(config, extra: dict) -> None:
    """Keeps on each reward domain the ROLL worker path the config gave (`roll_worker_cls`, not a config
    field), so --dry_run shows the mapping only where one happened."""
    for domain, roll_path in extra.get("reward_worker_cls", {}).items():
        if domain in config.rewards:
            config.rewards[domain].roll_worker_cls = roll_path


def reward_mapping(config) -> list[str]:
    """Lines for --dry_run: each reward domain whose config named a ROLL worker, with roll's class for it (a
    config that names roll's class already gets none)."""
    lines = [
        f"  rewards.{domain}: {reward.roll_worker_cls} -> {reward.worker_cls}"
        for domain, reward in config.rewards.items()
        if getattr(reward, "roll_worker_cls", None)
    ]
    return ["ROLL reward workers (ROLL path -> roll class):", *lines] if lines else []


# Keys roll declares under ROLL's name whose meaning differs; the algorithm-key differences are added by the
# branches that implement those keys.
DIFFERENCES = [
    (
        "logging_dir",
        "the TensorBoard/wandb/swanlab root (runs under <logging_dir>/<exp_name>); ROLL writes its log files "
        "there. roll's log lines go to the console (stderr) and Ray's session logs",
    ),
    (
        "output_dir",
        "samples and learning curves; checkpoints go to <checkpoint_dir>/checkpoints/step-N, where ROLL's "
        "checkpoint_config.output_dir becomes checkpoint_dir (null: output_dir)",
    ),
    (
        "track_with",
        "wandb and swanlab default to offline mode (files under the run directory); ROLL's default is online. "
        "Set tracker_kwargs.mode: online to upload",
    ),
    (
        "generate_opt_level",
        "default 0 (one batched generate call per step, reproducible); ROLL's default is 1 (its request "
        "scheduler, which roll has as generate_opt_level: 1). ROLL requires 1 for async_generation_ratio > 0; "
        "roll runs async with either (0: whole steps queued ahead, docs/async.md)",
    ),
    # ROLL defects in its algorithm keys: roll implements the evident intent (docs/algorithms.md §11)
    (
        "error_max_len_clip",
        "judges only samples with score ≤ 0; ROLL drops every sample whose score is not exactly 0 or 1",
    ),
    (
        "norm_std_type: group",
        "each row is divided by its own group's std, also with a non-group mean; ROLL crashes on that mix",
    ),
    (
        "norm_mean_type / norm_std_type: group",
        "with one sample per prompt, or a constant group, the score becomes 0 (ROLL's agentic rule); ROLL's RLVR "
        "gives NaN",
    ),
    (
        "adv_estimator: grpo",
        "leaves norm_mean_type / norm_std_type as set (grpo normalises in the estimator); ROLL overwrites them",
    ),
    (
        "difficulty_loss_weight",
        "applied, or a clear error when the difficulty column is missing; ROLL silently skips it for object arrays",
    ),
    (
        "use_reward_scaling",
        "divides the scores by their batch std (a constant batch: 0); ROLL declares the key and reads it nowhere",
    ),
    ("reward_clip", "applied once, at response level; ROLL applies it twice (response and token level)"),
    (
        "adv_estimator: gigpo",
        "step groups are formed within each episode group (the GiGPO paper); ROLL pools equal states across groups",
    ),
    ("use_pg_clip_range", "the dual clip uses dual_clip_ratio_c; ROLL uses the constant 1 + 2·pg_clip"),
    ("norm_mean_type / norm_std_type: running", "not offered (batch, group, null); ROLL raises KeyError"),
    # maths kept from verl on purpose, each with ROLL's behaviour and how to get ROLL's numbers (issue 34)
    (
        "dual_clip_loss",
        "default true, capping a negative-advantage token's loss at dual_clip_ratio_c·|A| (3.0, verl); ROLL's "
        "default is false and its cap 1 + 2·pg_clip. For ROLL's: dual_clip_loss: false, or dual_clip_ratio_c: "
        "1 + 2·pg_clip (1.4 at pg_clip 0.2)",
    ),
    (
        "adv_estimator: gae",
        "verl's GAE: advantages are always whitened over the batch's valid tokens, and the (value, advantage) "
        "state is carried across masked positions (γ once per gap, 0 after the last valid token). ROLL whitens "
        "only with whiten_advantages: true (then the two agree) and runs GAE over every column on the unmasked "
        "critic values, padding included; no key gives that",
    ),
    (
        "returns",
        "reinforce / step_reinforce / gigpo returns are masked to the response (= the advantages); ROLL keeps the "
        "discounted sums on prompt and padding columns. Only the value loss reads returns, on the response "
        "mask, so no loss differs",
    ),
    (
        "empty response",
        "its score sits nowhere, so grpo and norm_* count it as 0 in the group and batch statistics; ROLL puts "
        "it on the last prompt column (masked out later) and normalises with the real score. The same whenever "
        "an empty response scores 0 (the rule rewards do)",
    ),
    (
        "loss_agg_mode: seq-mean-*",
        "divides by the non-empty rows of the optimizer step over all ranks (verl), as ROLL's strategies do "
        "(global_valid_samples); ROLL's agg_loss called without counts divides by all B rows: pass "
        "global_batch_size=B to roll.algorithms.agg_loss for that",
    ),
    (
        "entropy_loss_coef",
        "the entropy bonus is taken over the tokens the sample masks keep; ROLL's RLVR actor takes it over every "
        "response token, samples dropped by max_len_mask / difficulty_mask / error_max_len_clip included",
    ),
    (
        "difficulty_loss_weight / length_loss_weight",
        "min, max and the mean-1 renormalisation over the step's batch (lengths before the sample masks, as "
        "ROLL); ROLL computes them per micro-batch. The same when one micro-batch holds the step "
        "(per_device_train_batch_size = rows per step, gradient_accumulation_steps 1, one rank)",
    ),
    ("rl_loss_coef", "also applies in the agentic pipeline; ROLL declares it for RLVR only"),
    (
        "ratio_type: segment",
        "the PPO loss only (refused with tis, topr, cispo, kimi15); ROLL's agentic ActorPGWorker feeds the turn "
        "ratio to those too",
    ),
    (
        "pg_variant",
        "a top-level key (ROLL's actor_train.pg_variant is taken as an alias); roll's ActorWorker runs every "
        "variant, so ROLL's ActorPGWorker path maps to it",
    ),
    (
        "pretrain / reward_pretrain",
        "fill only the model paths left unset; ROLL overwrites the paths of actor_train, actor_infer and reference "
        "with pretrain as soon as one of them is unset",
    ),
    (
        "interleave_probs",
        "draws each prompt's file with these probabilities; ROLL declares the key and reads it nowhere (a single "
        "1.0 is taken as ROLL's no-op)",
    ),
    (
        "eval_steps",
        "without validation data, a warning says no validation will run; ROLL skips validation silently",
    ),
    (
        "custom_envs.<tag>.agent_template",
        "the traj manager renders it for every turn; the step manager's prompt (history window) takes no template",
    ),
    (
        "importance_sampling: seq",
        "refused with any loss but PPO (pg_variant ppo / policy_loss_mode vanilla); ROLL's ActorPGWorker "
        "silently ignores it",
    ),
]


def compatibility_page() -> str:
    """docs/roll_compatibility.md: the table, the reward mapping, and the keys shared under ROLL's names."""
    from roll.configs.agentic import AgenticConfig
    from roll.configs.rlvr import RLVRConfig
    from roll.configs.worker import DataArgs, GeneratingArgs, ModelArgs, RewardConfig, TrainingArgs

    lines = [
        "# ROLL compatibility",
        "",
        "<!-- generated by `python -m roll.configs.roll_compat > docs/roll_compatibility.md`; a test checks it -->",
        "",
        "A ROLL YAML loads here unedited when every key it uses is *supported* (same name, same meaning) or an",
        "*alias* (ROLL's spelling, rewritten to roll's before the strict loader). A *refused* key or value fails",
        "with the reason, and says what to set instead.",
        "All problems of a file are reported together, grouped by block.",
        "",
        "## Keys under other names, and refused keys",
        "",
        "| block | ROLL key | status | meaning here / reason |",
        "|---|---|---|---|",
    ]
    for entry in ROLL_KEYS:
        note = entry.note.replace("|", "\\|")  # a literal bar would split the table cell
        lines.append(f"| {entry.block or 'top level'} | `{entry.key}` | {entry.status} | {note} |")
    lines += [
        "",
        "## Reward workers by ROLL's dotted paths",
        "",
        "| ROLL worker_cls | roll class | status |",
        "|---|---|---|",
    ]
    for roll_path, ours in ROLL_REWARD_WORKERS.items():
        exists = importlib.util.find_spec(ours.rpartition(".")[0]) is not None
        lines.append(f"| `{roll_path}` | `{ours}` | {'supported' if exists else 'pending (module not built yet)'} |")
    lines += ["", "## Keys with ROLL's name and meaning (supported)", ""]
    blocks = [
        ("top level (RLVR)", RLVRConfig),
        ("top level (agentic)", AgenticConfig),
        ("every role", RewardConfig),
        ("model_args", ModelArgs),
        ("training_args", TrainingArgs),
        ("data_args", DataArgs),
        ("generating_args", GeneratingArgs),
    ]
    for title, cls in blocks:
        names = ", ".join(f"`{f.name}`" for f in dataclasses.fields(cls) if f.init and f.name != "name")
        lines.append(f"- **{title}**: {names}")
    lines += ["", "## Same name, different meaning here", ""]
    lines += [f"- `{key}`: {text}" for key, text in DIFFERENCES]
    lines += [
        "",
        "strategy_config keys are checked by `--dry_run` with each engine's own validator (vllm, sglang,",
        "megatron_train/megatron_infer, fsdp2_train/fsdp2_infer); see docs/strategies.md for the key lists.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(compatibility_page(), end="")
