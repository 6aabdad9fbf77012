"""What the model reads and what the environment gets in a text turn, shared by the env managers and roll's
EnvRunner (the agent that plays an environment through the OpenAI-compatible endpoint), so both render an
episode token for token alike."""

import re


def fill_template(template: str | None, observation: str, turns_taken: int, env_config, suffix: str) -> str:
    """The observation, or custom_envs.<tag>.agent_template filled in (ROLL's trajectory placeholders)."""
    if not template:
        return observation
    return template.format(
        observation=observation,
        turn_idx=turns_taken + 1,
        actions_left=env_config.max_turns - turns_taken,
        max_response_length=env_config.max_tokens_per_step,
        suffix=suffix,
    )


def with_instructions(instructions: str, text: str) -> str:
    """The environment's instructions, then the first turn's text."""
    return f"{instructions}\n{text}" if instructions else text


def parse_action(action_re: re.Pattern | None, reply: str) -> str:
    """What the environment gets: the reply, or the last group action_pattern matched ('' if none)."""
    if action_re is None:
        return reply
    match = action_re.search(reply)
    if match is None:
        return ""
    groups = [group for group in match.groups() if group is not None]
    return groups[-1] if groups else match.group(0)


def compile_action_pattern(env_config) -> re.Pattern | None:
    return re.compile(env_config.action_pattern, re.DOTALL) if env_config.action_pattern else None
