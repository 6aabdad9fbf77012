"""ROLL's top-level `sequence_length` in an agentic config: roll's prompt_length / response_length from it.

ROLL bounds a whole agentic row by sequence_length: a trajectory (traj manager: first prompt, replies and
observations; step manager: one turn's prompt and reply) is padded to it, each turn generates at most
min(max_tokens_per_step, what is left of sequence_length), and the episode ends once the context reaches it.
roll lays a row out as the first prompt (prompt_length wide) then the rest (response_length wide), so the same
row width is prompt_length + response_length = sequence_length. A value the user set is never rewritten: only
the unset length is derived, and a set pair is checked against sequence_length (check_roll_keys).
"""

import dataclasses


def _defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def derive_agentic_lengths(cls, data: dict, extra: dict) -> list:
    """Sets data's unset prompt_length / response_length from ROLL's sequence_length (called by the agentic
    kind's translation, `cls` its config class); the derivation is kept in extra["derived_lengths"] for --dry_run.
    Returns (key path, message) problems."""
    from roll.configs.agentic import EnvConfig

    seq = extra.get("sequence_length")
    if seq is None:
        return []
    if isinstance(seq, bool) or not isinstance(seq, int):
        return []  # check_roll_keys reports the wrong type
    given = [key for key in ("prompt_length", "response_length") if key in data]
    if len(given) == 2:
        return []  # both set: check_roll_keys checks prompt_length + response_length ≤ sequence_length
    env_defaults = _defaults(EnvConfig)
    envs = [env for env in (data.get("custom_envs") or {}).values() if isinstance(env, dict)]
    steps = [env.get("max_tokens_per_step", env_defaults["max_tokens_per_step"]) for env in envs]
    longest = max((s for s in steps if isinstance(s, int)), default=env_defaults["max_tokens_per_step"])
    step_only = bool(envs) and all(
        env.get("env_manager", env_defaults["env_manager"]) in ("step", "agent_native") for env in envs
    )
    if given == ["prompt_length"]:
        prompt = data["prompt_length"]
        how = "sequence_length − prompt_length (set)"
    elif given == ["response_length"]:
        prompt = seq - data["response_length"] if isinstance(data["response_length"], int) else None
        how = "sequence_length − response_length (set)"
    elif step_only:  # a step row is one turn: its prompt (history window included) and one reply
        prompt = seq - (longest + 1)
        how = "a step row's reply: max_tokens_per_step + 1 end-of-turn token; the rest of sequence_length its prompt"
    else:  # the first turn keeps roll's default prompt budget; the rest of the trajectory gets the remainder
        prompt = min(_defaults(cls)["prompt_length"], seq - 1)
        how = "the first turn keeps roll's default prompt_length; the rest of the trajectory gets the remainder"
    if not isinstance(prompt, int) or isinstance(prompt, bool):
        return []  # the strict build reports the wrong type of the set length
    response = seq - prompt
    if prompt < 1 or response <= longest:
        extra.pop("sequence_length")  # reported here; check_roll_keys would only repeat it
        return [
            (
                "sequence_length",
                f"'sequence_length' = {seq} leaves prompt_length = {prompt}, response_length = {response} "
                f"({how}), but a turn may generate max_tokens_per_step = {longest} tokens plus an end-of-turn "
                "token; raise sequence_length, or set prompt_length and response_length (their sum ≤ "
                "sequence_length)",
            )
        ]
    derived = {
        key: value for key, value in (("prompt_length", prompt), ("response_length", response)) if key not in data
    }
    data.update(derived)
    extra["derived_lengths"] = (seq, derived, how)
    return []


def length_lines(config) -> list[str]:
    """--dry_run lines: the lengths derived from ROLL's sequence_length (none where the config set them)."""
    note = getattr(config, "roll_derived_lengths", None)
    if not note:
        return []
    seq, derived, how = note
    values = ", ".join(f"{key} = {value}" for key, value in derived.items())
    return [f"from ROLL's sequence_length = {seq}: {values} ({how})"]
