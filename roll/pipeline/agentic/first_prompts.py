"""The first prompt of every environment tag, built as its env manager builds it, checked against
`prompt_length` before any worker starts (and by `--dry_run` where the tokenizer is on disk).

Without it, a first prompt longer than `prompt_length` surfaced as a tensor-size error from `left_pad`
while the pipeline was being built (issue 31: the calculator's 151-token first prompt, prompt_length 128).
"""

from roll.agentic.env_managers import MANAGERS
from roll.configs.agentic import group_tags
from roll.configs.loader import ConfigError

PROBE_TEXT = "Reply with one word."  # the weight-sync probe's prompt where no first prompt can be built


def first_prompt_ids(config, tag: str, chat, env_cls, seed: int) -> list[int]:
    """The token ids the env manager of `tag` would generate the first reply from, at `seed`; raises
    ValueError naming the tag when they do not fit prompt_length."""
    env = config.custom_envs[tag]
    if not MANAGERS[env.env_manager].plays_in_driver:  # an outside agent writes the first prompt: a fixed one probes
        return chat.prompt_ids(PROBE_TEXT)
    manager = MANAGERS[env.env_manager](
        0, tag, env, chat, 0.0, config.prompt_length, config.response_length, env_cls=env_cls
    )
    try:
        manager.start(seed, "first-prompt", "first-prompt")
        return manager.request()
    finally:
        manager.env.close()


def check_first_prompts(config, chat, env_classes: dict | None = None) -> None:
    """Every tag of the training and validation env managers whose environment is a shipped one: its first
    prompt must fit prompt_length. A user's environment is not reset in the driver (its reset may need what
    only the environment workers have, or count its calls); its env manager refuses a too-long first prompt
    at its first reset, with the same message. `env_classes`: tag → class (None: the shipped registry)."""
    from roll.agentic.envs.registry import list_envs

    shipped = set(list_envs())
    for key, seed in (("train_env_manager", config.seed), ("val_env_manager", config.val_seed_offset)):
        manager = getattr(config, key)
        if manager is None:
            continue
        for tag in dict.fromkeys(group_tags(manager)):
            if config.custom_envs[tag].env_type not in shipped or not resets_in_driver(config.custom_envs[tag]):
                continue
            try:
                first_prompt_ids(config, tag, chat, (env_classes or {}).get(tag), seed)
            except ValueError as error:
                raise ConfigError(
                    f"{error} (the first prompt of {key}'s tag {tag!r} at seed {seed}, built as its "
                    f"{config.custom_envs[tag].env_manager} env manager builds it)"
                ) from None


def resets_in_driver(env) -> bool:
    """False for an environment whose reset would download its data or ask a tool server (roll_math, roll_qa,
    the mcp tool): their env managers check the first prompt at the first reset instead."""
    from roll.agentic.envs.registry import resolve_env_class
    from roll.agentic.envs.tools import TOOLS

    if not MANAGERS[env.env_manager].plays_in_driver or not resolve_env_class(env.env_type).reset_in_driver:
        return False
    tools = env.tool_wrapper.tool_configs if env.tool_wrapper is not None else []
    return not any(TOOLS[tool.tool_id].contacts_at_reset for tool in tools)


def check_first_prompts_on_disk(config):
    """`--dry_run`'s check: where the tokenizer role's model directory (actor_train's; actor_infer's without it)
    is on this machine, its tokenizer builds each tag's first prompt (the pipeline runs the same check before any
    worker starts). Returns `config`."""
    from pathlib import Path

    from roll.agentic.env_managers import ChatTokens
    from roll.agentic.envs.registry import resolve_env_class
    from roll.pipeline.core.preflight import TOKENIZER_FILES

    model = Path(getattr(config, config.tokenizer_role()).model_args.model_name_or_path).expanduser()
    if not any((model / name).is_file() for name in TOKENIZER_FILES):
        return config  # no local tokenizer (a hub id, another machine's path): the pipeline checks at start
    from transformers import AutoTokenizer

    classes = {}
    for tag, env in config.custom_envs.items():
        if not MANAGERS[env.env_manager].plays_in_driver:
            continue  # not reset in the driver
        try:
            classes[tag] = resolve_env_class(env.env_type)
        except (ImportError, TypeError, ValueError):
            return config  # the pipeline names a class that does not resolve, with its key
    check_first_prompts(config, ChatTokens(AutoTokenizer.from_pretrained(str(model))), classes)
    return config
