"""Aliases for the keys of ROLL's current example YAMLs: keys ROLL's own loader drops or never reads, ROLL's
run-level keys spread over roll's roles, and its packing / rendering / engine switches.

ROLL builds its configs with dacite's non-strict `from_dict`, which drops any key that is not a field; a few
fields it declares are read nowhere. Such keys are accepted here with a logged note, since ROLL ignores them
too (a user porting a ROLL file sees the note instead of a silent drop). Used by roll.configs.roll_compat.
"""

from roll.utils.logging import get_logger

logger = get_logger("roll.config")

# (block, key) → why ROLL ignores it (checked against ROLL's source: roll/configs/*.py and its pipelines)
IGNORED = {
    ("model_args", "flash_attn"): "not a field of ROLL's ModelArguments (attention is chosen by attn_implementation)",
    ("validation", "eval_steps"): "not a field of ROLL's validation block (the top-level eval_steps is the one read)",
    ("<role>", "use_remove_padding"): "not a field of ROLL's WorkerConfig",
    ("", "positive_loss_coef"): "not a field of ROLL's RLVRConfig (ROLL declares `postive_loss_coef`, unread)",
    ("", "model_name"): "not a field of ROLL's configs (its agentic examples set it; ROLL's loader drops it)",
    **{
        (
            "",
            key,
        ): "not a field of ROLL's configs (ROLL drops it); normalise rewards with norm_mean_type / norm_std_type"
        for key in ("reward_norm", "reward_shift", "reward_scale")
    },
}
# declared by ROLL with this type but read nowhere: a value of another type is an error, as in ROLL's loader
UNREAD = {
    ("", "use_topr_neg_loss_coef"): (float, "declared as a float in ROLL's RLVRConfig and read nowhere"),
    ("", "use_reward_norm"): (bool, "declared in ROLL's config and read nowhere; use norm_mean_type / norm_std_type"),
    ("", "add_len_reward"): (bool, "declared in ROLL's config and read nowhere; shape by length with max_len_mask"),
    ("", "use_topr_loss"): (bool, "declared in ROLL's RLVRConfig and read nowhere; select TOPR with pg_variant: topr"),
}


def ignored(block: str, key: str):
    why = IGNORED[(block, key)]

    def note(target, value, path):
        logger.warning("'%s' = %r is ignored: %s, so ROLL ignores it too", path, value, why)
        return None

    return note


def unread(block: str, key: str):
    kind, why = UNREAD[(block, key)]

    def note(target, value, path):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (isinstance(value, bool) if kind is bool else number):
            expected = "true or false" if kind is bool else "a number"
            return f"'{path}' = {value!r}: expected {expected} (ROLL's type; the value is not used: {why})"
        logger.warning("'%s' = %r is ignored: %s", path, value, why)
        return None

    return note


def rpc_timeout(blocks: tuple, named_maps: tuple):
    """ROLL's one timeout for its remote calls → the rpc_timeout left unset of every role (`blocks`: the kind's
    roles and its other blocks with workers, e.g. env managers; `named_maps`: maps of named roles, e.g. rewards)."""

    def spread(top, value, path):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            return f"'{path}' = {value!r}: expected a positive number of seconds"
        found = [top[r] for r in blocks if isinstance(top.get(r), dict)]
        for key in named_maps:
            found += [b for b in (top.get(key) or {}).values() if isinstance(b, dict)]
        for block in found:
            block.setdefault("rpc_timeout", value)
        return None

    return spread


PROFILER_TOOLS = {"profiler_timeline": "torch", "profiler_memory": "torch_memory"}


def profiler_switch(top, value, path):
    """ROLL's profiler_timeline / profiler_memory (rank 0 of every role, every step) → the profiler block."""
    if not isinstance(value, bool):
        return f"'{path}' = {value!r}: expected true or false"
    if not value:
        return None
    tool, block = PROFILER_TOOLS[path], top.setdefault("profiler", {})
    if not isinstance(block, dict) or block.setdefault("tool", tool) != tool:
        other = block.get("tool") if isinstance(block, dict) else block
        return f"'{path}' = true (profiler.tool {tool}) conflicts with profiler.tool = {other!r}: set only one"
    steps = top.get("max_steps")
    if not isinstance(steps, int) or isinstance(steps, bool):
        if not block.get("steps"):
            return f"'{path}' = true profiles every step, but max_steps is not set: set max_steps or profiler.steps"
    else:
        block.setdefault("steps", list(range(1, steps + 1)))
    block.setdefault("ranks", [0])
    return None


def profiler_output_dir(top, value, path):
    block = top.setdefault("profiler", {})
    if not isinstance(value, str) or not isinstance(block, dict):
        return f"'{path}' = {value!r}: expected a directory path"
    if block.setdefault("save_path", value) != value:
        return f"'{path}' = {value!r} conflicts with profiler.save_path = {block['save_path']!r}: set only one"
    return None


def include_stop_str_in_output(block, value, path):
    if value is None or value is True:
        return None
    return (
        f"'{path}' = {value!r} is refused: roll keeps a matched stop string in the response (ROLL's default, true); "
        "dropping it is not built"
    )


def max_env_step_concurrent(block, value, path):
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return None if ok else f"'{path}' = {value!r}: expected an integer ≥ 0 (0 = no cap)"


PACKING_KEYS = {
    "algorithm",
    "max_packed_sequence_length_train",
    "max_packed_sequence_length_forward",
    "min_num_micro_batches_train",
    "min_num_micro_batches_forward",
}


def sequence_packing_args(specs: dict):
    """`specs`: the kind's RoleSpecs (a role that never trains never reads the train budget)."""

    def translate(block, value, path):
        return _sequence_packing_args(block, value, path, specs)

    return translate


def _sequence_packing_args(block, value, path, specs: dict):
    """ROLL's packing settings onto roll's packing: 'none' packs each micro-batch as it is (roll's
    use_sequence_packing); 'load_balance' regroups rows into micro-batches of at most max_packed_sequence_length
    tokens, which is roll's dynamic batching with that token budget."""
    if not isinstance(value, dict):
        return f"'{path}' = {value!r}: expected a mapping ({', '.join(sorted(PACKING_KEYS))})"
    problems = [
        f"unknown key '{path}.{k}' (valid: {', '.join(sorted(PACKING_KEYS))})" for k in set(value) - PACKING_KEYS
    ]
    algorithm = value.get("algorithm", "none")
    if algorithm not in ("none", "load_balance"):
        problems.append(f"'{path}.algorithm' = {algorithm!r}: valid 'none', 'load_balance'")
    for key in PACKING_KEYS - {"algorithm"}:
        number = value.get(key)
        if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
            problems.append(f"'{path}.{key}' = {number!r}: expected a positive integer or null")
    if problems or algorithm != "load_balance" or not block.get("use_sequence_packing"):
        return "; ".join(problems) or None  # ROLL reads the packing settings only with use_sequence_packing
    role = specs.get(path.split(".")[0])
    trains = role is not None and role.trained
    for phase, ours in (("train", "train"), ("forward", "infer")):
        budget = value.get(f"max_packed_sequence_length_{phase}")
        if budget is None or (phase == "train" and not trains):  # a role that never trains never reads it
            continue
        key = f"max_tokens_per_microbatch_in_{ours}"
        if block.setdefault(key, budget) != budget:
            problems.append(
                f"'{path}.max_packed_sequence_length_{phase}' = {budget} conflicts with '{key}' = {block[key]}"
            )
        block.setdefault(f"use_dynamic_batching_in_{ours}", True)
    return "; ".join(problems) or None


def critic_value_head(data: dict) -> None:
    """ROLL's critic with model_type trl (a causal LM with trl's value head) = roll's critic value model, a
    one-label token-classification head on the same LM: one scalar per token from the last hidden state."""
    critic = data.get("critic")
    args = critic.get("model_args") if isinstance(critic, dict) else None
    if isinstance(args, dict) and args.get("model_type") == "trl":
        args["model_type"] = "auto_token_classification"
        logger.warning(
            "'critic.model_args.model_type' = 'trl' is taken as auto_token_classification: roll's value head "
            "(ROLL's trl value-head checkpoints, v_head.*, do not load into it)"
        )


def skip_mock_system_prompt(block, value, path):
    """ROLL's switch for prompts without a system message: true renders the tokenizer's template as it is, which
    is what roll does; false (ROLL's default) strips the template's default system block, which roll does not."""
    if value is True:
        return None
    return (
        f"'{path}' = {value!r} is refused: roll renders the tokenizer's chat template as it is (ROLL's true); "
        "stripping the default system block of prompts without a system message is not built"
    )


def boolean(block, value, path):
    return None if isinstance(value, bool) else f"'{path}' = {value!r}: expected true or false"


def aliases(blocks: tuple, named_maps: tuple, specs: dict) -> dict:
    """(block, key) → alias function, for roll.configs.roll_compat's table of a kind (its role blocks, maps of
    named roles and RoleSpecs)."""
    return {
        **{key: ignored(*key) for key in IGNORED},
        **{key: unread(*key) for key in UNREAD},
        ("", "rpc_timeout"): rpc_timeout(blocks, named_maps),
        ("", "skip_mock_system_prompt"): skip_mock_system_prompt,
        ("", "profiler_timeline"): profiler_switch,
        ("", "profiler_memory"): profiler_switch,
        ("", "profiler_output_dir"): profiler_output_dir,
        ("", "enable_old_logprobs_recompute"): boolean,
        ("", "parse_tool_call_parameter_to_dict"): boolean,
        ("<role>", "offload_nccl"): boolean,
        ("<role>", "sequence_packing_args"): sequence_packing_args(specs),
        ("generating_args", "include_stop_str_in_output"): include_stop_str_in_output,
        ("custom_envs", "max_env_step_concurrent"): max_env_step_concurrent,
    }
