"""ROLL spellings → roll's, applied to the resolved plain dict before strict loading.

`translate(data)` rewrites every alias of roll.configs.roll_compat.keys in place and returns the problems
(refused keys, bad alias values) as (key path, message) pairs, so the loader reports them
together with its own unknown keys and wrong types. The generated page docs/roll_compatibility.md is
scripts/roll_compat_page.py's.
"""

import dataclasses
import functools
import importlib.util
import posixpath

from roll.configs.roll_compat import example_keys
from roll.configs.roll_compat.keys import (
    DTYPES,
    ENV_YAML_VARIABLES,
    REFUSED,
    ROLL_ACTOR_WORKERS,
    ROLL_KEYS,
    ROLL_REWARD_PREFIX,
    ROLL_REWARD_WORKERS,
)

SUB_BLOCKS = ("model_args", "data_args", "generating_args", "training_args")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def translate(data: dict, kind) -> list:
    """ROLL's spellings in `data` (the resolved plain dict of a `kind` config: its config class) → roll's, in
    place; returns the problems. The kind's roles (ROLES) get the role aliases, its `roll_blocks` the block
    aliases, and its `roll_translate` hook adds its own translations before and after the shared ones."""
    problems: list = []
    kind.roll_translate(data, problems, first=True)  # e.g. RLVR's judge server: its blocks then get their aliases
    table = alias_table(kind)
    _apply_block(data, "", "", problems, table)
    if isinstance(data.get("actor_train"), dict) and "actor_train" in kind.role_specs():
        _apply_block(data["actor_train"], "actor_train", "actor_train", problems, table, top=data)
    for role in kind.role_specs():
        if isinstance(data.get(role), dict):
            _apply_block(data[role], "<role>", role, problems, table)
    for name, path, block in kind.roll_blocks(data):
        _apply_block(block, name, path, problems, table)
    kind.roll_translate(data, problems, first=False)
    _walk(data, "", problems, table)
    return problems


LORA_KEYS = ("lora_target", "lora_rank", "lora_alpha", "lora_dropout")


def drop_lora_copies(data: dict) -> None:
    """ROLL repeats actor_train's lora keys on actor_infer / reference (${lora_rank}). ROLL reads a rollout
    role's lora_target only as "serve a LoRA" (vLLM enable_lora, its lora_rank as max_lora_rank), never as a
    target list, so with a LoRA actor_train it is dropped in any form (e.g. all-linear there, the module list
    here: ROLL's megatron LoRA examples); the other keys are dropped when all equal actor_train's, different
    ones are left for the LoRA check to refuse. roll serves the merged weights (lora_weight_sync: merged):
    the same policy as ROLL's adapter serving."""
    train = data.get("actor_train")
    train = (train.get("model_args") or {}) if isinstance(train, dict) else {}
    for role in ("actor_infer", "reference"):
        block = data.get(role)
        args = block.get("model_args") if isinstance(block, dict) else None
        given = [key for key in LORA_KEYS if isinstance(args, dict) and key in args]
        if train.get("lora_target") and "lora_target" in given:
            del args["lora_target"]
            given.remove("lora_target")
        if given and all(args[key] == train.get(key) for key in given):
            for key in given:
                del args[key]


ENV_SETTINGS = ("action_pattern", "format_penalty", "env_instruction")


def lift_env_settings(env: dict, path: str, problems: list) -> None:
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


def _walk(node: dict, path: str, problems: list, table: dict) -> None:
    for key, value in node.items():
        if not isinstance(value, dict):
            continue
        if key in SUB_BLOCKS:
            _apply_block(value, key, _join(path, key), problems, table)
        elif key not in ("strategy_args", "env_config", "reward_args", "system_envs", "custom_envs"):
            _walk(value, _join(path, key), problems, table)


def apply_block(block: dict, name: str, path: str, problems: list, kind) -> None:
    """The aliases of ROLL's block `name` (a ROLL_KEYS block) applied to `block` at key path `path`, for a
    kind's own translation hook."""
    _apply_block(block, name, path, problems, alias_table(kind))


def _apply_block(block: dict, name: str, path: str, problems: list, table: dict, top: dict | None = None) -> None:
    for entry in ROLL_KEYS:
        if entry.block != name or entry.key not in block:
            continue
        key_path = _join(path, entry.key)
        if (name, entry.key) not in table:  # a field of this kind under ROLL's name: not ROLL's alias here
            continue
        if entry.status == REFUSED:
            del block[entry.key]
            problems.append((key_path, f"'{key_path}' is refused: {entry.note}"))
        else:
            alias = table[(name, entry.key)]
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


# ROLL template name → roll's chat_template (None: the tokenizer's own). qwen3_coder is in no ROLL registry: its
# agentic examples name it, and ROLL's env managers then apply the tokenizer's own template (Qwen3-Coder's)
ROLL_TEMPLATES = {"native": None, "qwen2_5": None, "qwen3": "qwen3", "chatml": "chatml", "qwen3_coder": None}


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


def _global_template(blocks):
    def spread(block, value, path):
        return _set_in_roles(block, blocks, "data_args", "template", value, path)

    return spread


def _max_grad_norm(trained):
    def spread(block, value, path):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            return f"'{path}' = {value!r}: expected a positive number"
        return _set_in_roles(block, trained, "training_args", "max_grad_norm", value, path)

    return spread


ROLL_ENV_MANAGERS = {
    "roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager": "traj",
    "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager": "step",
    "roll.pipeline.agentic.env_manager.step_concat_env_manager.StepConcatEnvManager": "step_concat",
    "roll.pipeline.agentic.env_manager.agent_native_env_manager.AgentNativeStepEnvManager": "agent_native",
    "roll.pipeline.agentic.env_manager.proxy_env_manager.ProxyEnvManager": "proxy",
}


_ROLL_MANAGER_PREFIX = "roll.pipeline.agentic.env_manager."
# why each ROLL env manager class that roll does not map is refused (read from ROLL's env_manager/ sources)
REFUSED_ENV_MANAGERS = {
    "vl_traj_env_manager.VLTrajEnvManager": (
        "ROLL's VLTrajEnvManager feeds image observations to a vision-language policy; roll builds text-only models"
    ),
}


def _env_manager_cls(block, value, path):
    ours = ROLL_ENV_MANAGERS.get(value)
    if ours is None:
        short = value.removeprefix(_ROLL_MANAGER_PREFIX) if isinstance(value, str) else value
        reason = REFUSED_ENV_MANAGERS.get(short, _note("custom_envs", "env_manager_cls"))
        return f"'{path}' = {value!r} is refused: {reason}"
    if block.setdefault("env_manager", ours) != ours:
        return f"'{path}' = {value!r} conflicts with 'env_manager' = {block['env_manager']!r}: set only one"
    return None


_ROLL_RUNNER_PREFIX = "roll.pipeline.agentic.agent_runner."
ROLL_AGENT_RUNNERS = {"gem_runner.GEMRunner": "roll.agentic.envs.runners.EnvRunner"}
# why each ROLL agent runner that roll does not map is refused (read from ROLL's agent_runner/ sources)
REFUSED_AGENT_RUNNERS = {
    "gem_runner.ToolCallRunner": (
        "ROLL's ToolCallRunner plays GEM environments whose reset/step exchange chat message lists with tool schemas "
        "(SokobanToolCallEnv); roll's environments exchange text: write an AgentRunner whose program declares its "
        "tools in the request (the endpoint renders them and returns the calls)"
    ),
    "rock.": "ROLL's ROCK runners drive agents inside Alibaba's ROCK sandbox service; roll has no ROCK client",
}


def _agent_runner_cls(block, value, path):
    if value is None or not (isinstance(value, str) and value.startswith(_ROLL_RUNNER_PREFIX)):
        if value is not None:
            block["agent_runner_cls"] = value  # roll's own key: a roll or user class path, checked with the config
        return None
    short = value.removeprefix(_ROLL_RUNNER_PREFIX)
    if short in ROLL_AGENT_RUNNERS:
        block["agent_runner_cls"] = ROLL_AGENT_RUNNERS[short]
        return None
    reason = next((why for name, why in REFUSED_AGENT_RUNNERS.items() if short.startswith(name)), None)
    return f"'{path}' = {value!r} is refused: {reason or 'no roll counterpart of this ROLL agent runner'}"


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


_SHARED_ALIASES = {
    **{("actor_train", key): _to_top(key) for key in ("pg_variant", "topr_positive_weight", "topr_negative_weight")},
    ("actor_train", "worker_cls"): _actor_worker_cls,
    ("", "hydra"): _drop,
    ("", "sequence_length"): _checked_later("sequence_length"),
    ("", "val_prompt_length"): _checked_later("val_prompt_length"),
    ("", "checkpoint_config"): _checkpoint_config,
    **{
        ("<role>", key): _positive_int_no_effect
        for key in ("sequence_length_round_in_train", "sequence_length_round_in_infer")
    },
    ("", "render_save_dir"): _drop,
    **{("", key): _drop for key in ENV_YAML_VARIABLES},
    ("custom_envs", "max_steps"): _column("max_turns"),
    ("custom_envs", "env_manager_cls"): _env_manager_cls,
    ("custom_envs", "agent_runner_cls"): _agent_runner_cls,
    ("custom_envs", "use_thread_lock"): _thread_lock,
    ("reward_normalization", "method"): _normalization_method,
    ("", "is_num_return_sequences_expand"): _num_return_sequences_expand,
    ("", "max_running_requests"): _max_running_requests,
    ("model_args", "dtype"): _dtype,
    ("data_args", "prompt"): _column("prompt_key"),
    ("data_args", "messages"): _column("messages_key"),
    ("data_args", "tag"): _column("tag_key"),
    ("data_args", "template"): _template,
    ("data_args", "dataset_dir"): _dataset_dir,
    ("generating_args", "num_beams"): _num_beams,
}


@functools.cache
def alias_table(kind) -> dict:
    """(block, key) → alias function (None: a refused key) for a kind's configs: the shared aliases, the ones
    that spread a ROLL run-level key over the kind's roles (RoleSpec), and no entry for a top-level key that is a
    field of the kind (its own meaning wins, e.g. a kind with a `sequence_length` field)."""
    specs = kind.role_specs()
    model_keys = {spec.roll_model_key for spec in kind.ROLES if spec.roll_model_key}
    table = {
        **_SHARED_ALIASES,
        **{("", key): _model_path(tuple(s.name for s in kind.ROLES if s.roll_model_key == key)) for key in model_keys},
        ("", "max_grad_norm"): _max_grad_norm(tuple(s.name for s in kind.ROLES if s.trained)),
        ("", "global_template"): _global_template(kind.ROLL_DATA_BLOCKS),
        **example_keys.aliases((*specs, *kind.ROLL_TIMEOUT_BLOCKS), kind.NAMED_ROLE_MAPS, kind.role_specs()),
    }
    table.update({(entry.block, entry.key): None for entry in ROLL_KEYS if entry.status == REFUSED})
    fields = {field.name for field in dataclasses.fields(kind)}
    return {(block, key): alias for (block, key), alias in table.items() if not (block == "" and key in fields)}


def _note(block: str, key: str) -> str:
    return next(e.note for e in ROLL_KEYS if (e.block, e.key) == (block, key))


def reward_worker(reward: dict, path: str, problems: list) -> None:
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
    seq = extra.get("sequence_length")
    if "sequence_length" in extra and (isinstance(seq, bool) or not isinstance(seq, int)):
        problems.append(("sequence_length", f"'sequence_length' = {seq!r}: expected a positive integer"))
    elif "sequence_length" in extra and not seq >= budget:
        problems.append(
            (
                "sequence_length",
                f"'sequence_length' = {extra['sequence_length']!r} < prompt_length + response_length = {budget} "
                f"({config.prompt_length} + {config.response_length}): ROLL pads every row to sequence_length; "
                "raise sequence_length or lower prompt_length / response_length",
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
