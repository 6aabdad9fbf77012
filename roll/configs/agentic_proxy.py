"""The keys of the proxy env manager (`env_manager: proxy`, ROLL's ProxyEnvManager), which serves the policy on an
OpenAI-compatible endpoint and trains on what an agent runner's episode asked of it.

Its settings sit where ROLL keeps them, in custom_envs.<tag>.env_config (PROXY_DEFAULTS); the rest of env_config
is the agent runner's (its `default_config`, or for roll's EnvRunner the environment's constructor). The env
manager blocks take ROLL's `llm_proxy` (what answers the requests) and roll's endpoint address keys.
"""

from dataclasses import dataclass
from typing import Any

from roll.configs.loader import ConfigError, field_help

# custom_envs.<tag>.env_config keys the proxy manager reads (ROLL's, except agent_timeout)
PROXY_DEFAULTS: dict[str, Any] = {
    "trajectory_mode": "traj",  # traj: one row per conversation; step: one row per request (ROLL's)
    "reward_granularity": "pass_rate",  # the runner result's metric used as the score, if it has it (ROLL's)
    "tool_call_parser": "qwen25",  # how tool calls are read from a reply when the request declares tools
    "enable_thinking": False,  # passed to the chat template (Qwen3's thinking switch)
    "enable_fork": False,  # traj: a request that rewrites the history starts a conversation that trains too
    "agent_timeout": 300.0,  # seconds the agent may take to send its next request (or to finish) after a reply
}
TRAJECTORY_MODES = ("traj", "step")
TOOL_CALL_PARSERS = ("qwen25",)
# why ROLL's other llm_proxy types are refused
REFUSED_PROXY_TYPES = {
    "openai": (
        "ROLL's openai proxy answers the env manager's turns with an outside OpenAI-compatible service "
        "(proxy_config.base_url); roll trains only on tokens its own actor_infer generated, with their log-probs, "
        "and sends no request off the machine"
    ),
    "random": (
        "ROLL's random proxy answers with the environment's sample_random_action(), a GEM method roll's "
        "environments do not have (and ROLL's ProxyEnvManager builds its proxy with no environment)"
    ),
}


@dataclass(frozen=True)
class ProxySettings:
    trajectory_mode: str = "traj"
    reward_granularity: str = "pass_rate"
    tool_call_parser: str = "qwen25"
    enable_thinking: bool = False
    enable_fork: bool = False
    agent_timeout: float = 300.0


@dataclass
class LLMProxyConfig:
    proxy_type: str = field_help(
        "policy",
        "what answers the environments' requests (ROLL's key): policy = actor_infer, the policy being trained (the "
        "only value roll serves; ROLL's openai and random are refused with their reason)",
    )
    proxy_config: dict[str, Any] = field_help(
        default_factory=dict, help="settings of the proxy type (ROLL's key); the policy proxy reads none: keep it empty"
    )


def split_settings(tag: str, env_config: dict) -> tuple[ProxySettings, dict]:
    """custom_envs.<tag>.env_config → (the proxy manager's settings, the agent runner's settings)."""
    where = f"custom_envs.{tag}.env_config"
    values = {key: env_config.get(key, default) for key, default in PROXY_DEFAULTS.items()}
    if values["trajectory_mode"] not in TRAJECTORY_MODES:
        raise ConfigError(f"'{where}.trajectory_mode' = {values['trajectory_mode']!r}: valid {TRAJECTORY_MODES}")
    if values["tool_call_parser"] not in TOOL_CALL_PARSERS:
        raise ConfigError(
            f"'{where}.tool_call_parser' = {values['tool_call_parser']!r}: roll reads tool calls in {TOOL_CALL_PARSERS}"
            " (Qwen2.5/Qwen3's <tool_call>{json}</tool_call>, ROLL's default)"
        )
    for key in ("enable_thinking", "enable_fork"):
        if not isinstance(values[key], bool):
            raise ConfigError(f"'{where}.{key}' = {values[key]!r}: expected true or false")
    if not isinstance(values["reward_granularity"], str):
        raise ConfigError(f"'{where}.reward_granularity' = {values['reward_granularity']!r}: expected a metric name")
    timeout = values["agent_timeout"]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigError(f"'{where}.agent_timeout' = {timeout!r}: expected a number of seconds > 0")
    values["agent_timeout"] = float(timeout)
    return ProxySettings(**values), {k: v for k, v in env_config.items() if k not in PROXY_DEFAULTS}


def check_llm_proxy(key: str, llm_proxy: LLMProxyConfig) -> None:
    proxy_type = llm_proxy.proxy_type
    if proxy_type in REFUSED_PROXY_TYPES:
        raise ConfigError(
            f"'{key}.llm_proxy.proxy_type' = {proxy_type!r} is refused: {REFUSED_PROXY_TYPES[proxy_type]}"
        )
    if proxy_type != "policy":
        raise ConfigError(f"'{key}.llm_proxy.proxy_type' = {proxy_type!r}: valid 'policy' (ROLL's default)")
    if llm_proxy.proxy_config:
        raise ConfigError(
            f"'{key}.llm_proxy.proxy_config' = {llm_proxy.proxy_config!r}: the policy proxy reads no settings (ROLL's "
            "ignores them too); remove them"
        )


def check_proxy_env(tag: str, env, config) -> dict:
    """custom_envs.<tag> with env_manager: proxy; returns the runner's settings (for EnvRunner, the environment's
    constructor keys, which the caller checks as any environment's). roll's own runner classes are resolved and
    their settings checked here (so --dry_run reports them); a user's class is imported by the pipeline, which
    checks it the same way."""
    where = f"custom_envs.{tag}"
    if not env.agent_runner_cls:
        raise ConfigError(
            f"'{where}.agent_runner_cls' is required with env_manager: proxy: the class that plays each episode "
            "through the endpoint (roll.agentic.envs.runners.ProgramRunner runs a program of yours, EnvRunner plays "
            "env_type, or your own AgentRunner subclass)"
        )
    settings, runner_settings = split_settings(tag, env.env_config)
    for key in ("train_env_manager", "val_env_manager"):
        manager = getattr(config, key)
        if manager is not None and tag in manager.tags and settings.agent_timeout >= manager.rpc_timeout:
            raise ConfigError(
                f"'{where}.env_config.agent_timeout' = {settings.agent_timeout} must be less than "
                f"'{key}.rpc_timeout' = {manager.rpc_timeout}: the environment workers wait for the agent within it"
            )
    if env.agent_runner_cls.startswith("roll."):
        try:
            check_runner(tag, env, runner_settings)
        except (ImportError, TypeError, ValueError) as error:
            raise ConfigError(f"'{where}': {error}") from None
    return runner_settings


def check_runner(tag: str, env, runner_settings: dict) -> None:
    """The runner class resolves, takes these settings, and has an environment to play if it plays one (ValueError
    if not)."""
    from roll.agentic.envs.runners import resolve_runner_class

    runner = resolve_runner_class(env.agent_runner_cls)
    runner.check_config(runner_settings)
    if runner.plays_env:
        if env.env_type is None:
            raise ValueError(f"{runner.__name__} plays an environment: set env_type")
    else:
        unread = [key for key in ("env_type", "tool_wrapper", "agent_template", "env_instruction", "action_pattern",
                                  "agent_system_template") if getattr(env, key) is not None]  # fmt: skip
        if unread:
            raise ValueError(
                f"{unread} set, but {runner.__name__} plays no environment of roll's and reads none of them; remove "
                "them"
            )
