"""The schema of the environments a policy acts in over several turns, shared by the kinds that run them (the
agentic kind's config is roll/pipeline/agentic/config.py): the environments (`custom_envs.<tag>`, their tools),
how many run and how they are grouped (`train_env_manager`, `val_env_manager`), how episode rewards are
normalised (`reward_normalization`), and the rules of a config with environments (`check_agentic`).

Batch shape: every pipeline step collects `rollout_batch_size` trajectories. The train env manager runs
`num_env_groups × group_size` environments; the `group_size` environments of a group start each episode
from the same seed (the same initial state), so their trajectories form one GRPO group.
"""

import math
from dataclasses import dataclass
from typing import Any, Literal

from roll.configs.agentic_proxy import (
    PROXY_DEFAULTS,
    LLMProxyConfig,
    check_llm_proxy,
    check_proxy_env,
)
from roll.configs.loader import ConfigError, field_help
from roll.configs.rl_checks import check_async, check_stop_strings
from roll.configs.worker import GeneratingArgs
from roll.utils.logging import get_logger

logger = get_logger("roll.config")
TRAJECTORY_ROWS = ("traj", "tir")  # managers whose training row is the whole episode (the others: one per turn)


def rows_per_episode(env) -> int:
    """Training rows one episode of this environment gives at most (the LR schedule's estimate)."""
    if env.env_manager == "proxy":
        mode = env.env_config.get("trajectory_mode", PROXY_DEFAULTS["trajectory_mode"])
        return 1 if mode == "traj" else env.max_turns
    return 1 if env.env_manager in TRAJECTORY_ROWS else env.max_turns


def gives_step_rows(env) -> bool:
    """One row per turn (what step-wise estimators such as GiGPO need)."""
    if env.env_manager == "proxy":
        return env.env_config.get("trajectory_mode", PROXY_DEFAULTS["trajectory_mode"]) == "step"
    return env.env_manager not in TRAJECTORY_ROWS


@dataclass
class ToolWrapperArgs:
    tool_reward: float = field_help(0.05, "reward of a turn that calls a tool (ROLL's default)", bounds="(-inf, inf)")
    tool_success_reward: float = field_help(
        0.25, "added when the tool ran without error (ROLL's default)", bounds="(-inf, inf)"
    )
    max_tool_uses: int | None = field_help(
        10, "tool calls per episode at most; later replies go to the environment. null = no cap", bounds="[1, inf)"
    )


@dataclass
class ToolConfig:
    tool_id: Literal["python_code", "search", "mcp", "calculator"] = field_help(
        help="python_code: the reply's <code>…</code> or ```python block runs in roll's kernel sandbox (roll.sandbox); "
        "search: <search>query</search> goes to a retrieval server over HTTP; mcp: <tool_call>{json}</tool_call> "
        "calls a tool of a Model Context Protocol server (needs the mcp extra); calculator (roll's): "
        "<calculator>expression</calculator>, whole-number arithmetic. With env_manager agent_native each is a "
        "function the chat template declares (python, search, the server's tools, calculator)"
    )
    tool_args: dict[str, Any] = field_help(
        default_factory=dict,
        help="python_code: timeout (5 s), sandbox_type (none | bwrap: both run in roll's sandbox), "
        "keep_error_last_line, tool_instruction, patterns (ROLL's), memory_mb (256), allow_unsafe_local_sandbox "
        "(false); search: search_url (null = $SEARCH_URL), topk (3), timeout (5 s per request), num_workers; mcp: "
        "server_url (its SSE endpoint), tool_names_subset, custom_prompt, num_workers, timeout (30 s per exchange); "
        "calculator: tool_instruction",
    )


@dataclass
class ToolWrapperConfig:
    wrapper_args: ToolWrapperArgs = field_help(default_factory=ToolWrapperArgs, help="rewards and the use cap")
    tool_configs: list[ToolConfig] = field_help(
        default_factory=list, help="the tools, tried in this order on each reply (ROLL's GEM tool wrapper)"
    )


@dataclass
class EnvConfig:
    env_type: str | None = field_help(
        None,
        "a registered environment (frozen_lake, sokoban, calculator, roll_math, roll_qa) or the dotted path of a "
        "roll.agentic.envs.BaseEnv subclass in your own module; required, except with env_manager: proxy, where it "
        "is the environment the agent runner plays (roll's EnvRunner) and stays unset for runners that play their own",
    )
    env_config: dict[str, Any] = field_help(
        default_factory=dict, help="keyword arguments of the environment's constructor"
    )
    env_manager: Literal["traj", "step", "step_concat", "agent_native", "tir", "proxy"] = field_help(
        "traj",
        "traj: one training sample per trajectory (loss on every model turn, episode reward at the end); "
        "step: one sample per turn with a history window and discounted step returns; step_concat (ROLL's "
        "StepConcatEnvManager): step's samples and returns, the prompt = the window's earlier observations joined "
        "(no actions, no env_instruction) and the current observation followed by the last info['suffix']; "
        "agent_native (ROLL's AgentNativeStepEnvManager): native tool calling, tool_wrapper's tools declared to the "
        "chat template as functions, calls parsed from the reply and answered as tool messages, one sample per "
        "turn (its prompt the exact context); tir: code (a tool call) executed in the middle of a reply, its "
        "output inserted before generation continues, traj's samples; proxy (ROLL's ProxyEnvManager): an agent runner "
        "(agent_runner_cls) plays each episode through an OpenAI-compatible endpoint served by actor_infer, and the "
        "requests it made train (docs/agents.md)",
    )
    agent_runner_cls: str | None = field_help(
        None,
        "env_manager proxy: the dotted path of the roll.agentic.envs.runners.AgentRunner subclass that plays each "
        "episode (ROLL's key; ROLL's GEMRunner = roll's EnvRunner); null for the other env managers",
    )
    max_turns: int = field_help(
        5, "model replies per episode at most (the environment may end it earlier)", bounds="[1, inf)"
    )
    max_tokens_per_step: int = field_help(16, "tokens the model may generate in one turn", bounds="[1, inf)")
    history_length: int = field_help(
        2,
        "step manager: earlier (observation, action) turns shown in each prompt; step_concat: the window counts the "
        "current turn, so history_length − 1 earlier observations (ROLL's rule)",
        bounds="[0, inf)",
    )
    action_pattern: str | None = field_help(
        None,
        "ROLL's reply parser: a regex searched in the reply; its last matching group is the action the environment "
        "gets (no match = an invalid action). null = the whole reply (the shipped envs take 'Right' or "
        "'<answer>Right</answer>'). ROLL puts it in env_config; both places are read",
    )
    format_penalty: float | None = field_help(
        None,
        "this environment's penalty for an invalid action (ROLL's env_config.format_penalty); null = the env "
        "manager's format_penalty",
        bounds="(-inf, 0]",
    )
    env_instruction: str | None = field_help(
        None,
        "the task description shown before the first observation (ROLL's env_config.env_instruction); null = the "
        "environment's own instructions",
    )
    agent_system_template: str | None = field_help(
        None, "a system message before the first turn (ROLL's key); null = none"
    )
    agent_template: str | None = field_help(
        None,
        "each turn's user message. traj manager: ROLL's placeholders {observation}, {turn_idx}, {actions_left} "
        "(max_turns − turns taken), {max_response_length} (max_tokens_per_step), {suffix} (the last step's "
        "info['suffix'], '' if none); the environment's instructions precede the first one. step manager: ROLL's "
        "{env_instruction}, {history} (the last history_length turns as '(step: k, observation: …, action: …, "
        "reward: …)'), {step_count}, {history_length}, {current_step}, {current_observation}, "
        "{max_response_length}. step_concat manager: {history} (the earlier observations of the window of "
        "history_length turns, the current one included, one per line) and {current_observation} (the observation, "
        "a newline, the last info['suffix']). null = the observation itself (step, step_concat: after the history "
        "window)",
    )

    max_episode_seconds: float | None = field_help(
        None,
        "agent_native and tir managers: an episode ends (stop reason 'time') once this much wall-clock time has "
        "passed at the end of a turn or tool call; null = no limit",
        bounds="(0, inf)",
    )
    tool_wrapper: ToolWrapperConfig | None = field_help(
        None,
        "ROLL's tool wrapper: tools the model may call before the environment steps (docs/agentic_envs.md, Tools); "
        "null = none",
    )


@dataclass
class EnvManagerConfig:
    tags: list[str] = field_help(default_factory=list, help="custom_envs keys these environments are drawn from")
    num_groups_partition: list[int] | None = field_help(
        None,
        "env groups per tag (same order as tags, summing to num_env_groups); null = as even as possible",
        bounds="[0, inf)",
    )
    num_env_groups: int = field_help(
        1, "groups of environments; a group's envs share each episode's seed", bounds="[1, inf)"
    )
    group_size: int = field_help(
        1, "environments per group (the GRPO group: trajectories from one initial state)", bounds="[1, inf)"
    )
    max_traj_per_env: int = field_help(
        -1,
        "episodes one environment may run per pipeline step; rollout_batch_size / (num_env_groups × group_size) "
        "must not exceed it. -1 (ROLL's default) = as many as rollout_batch_size needs",
        bounds="[1, inf)",
        also=(-1,),
    )
    max_env_num_per_worker: int = field_help(
        16, "environments per environment worker (a CPU-only Ray actor); workers = ceil(envs / this)", bounds="[1, inf)"
    )
    format_penalty: float = field_help(
        0.0,
        "added to a turn's reward when its reply does not match the environment's action pattern (use a value ≤ 0)",
        bounds="(-inf, 0]",
    )
    generating_args: GeneratingArgs | None = field_help(
        None, "sampling for these environments; null = actor_infer.generating_args for training, greedy for validation"
    )
    rpc_timeout: float = field_help(600.0, "seconds any call to the environment workers may take", bounds="(0, inf)")
    system_envs: dict[str, str] = field_help(
        default_factory=dict,
        help="environment variables of these environment workers, over the pipeline's system_envs (ROLL's key)",
    )
    llm_proxy: LLMProxyConfig = field_help(
        default_factory=LLMProxyConfig, help="what answers the environments' model requests (ROLL's key)"
    )
    proxy_host: str = field_help(
        "127.0.0.1",
        "env_manager proxy: the address each environment worker's OpenAI-compatible endpoint listens on (loopback: "
        "only programs on the same machine can reach it; every request also needs its episode's token)",
    )
    proxy_port: int = field_help(
        0,
        "env_manager proxy: the endpoint's port; 0 = any free port (one endpoint per environment worker)",
        bounds="[0, 65535]",
    )

    @property
    def num_envs(self) -> int:
        return self.num_env_groups * self.group_size


@dataclass
class RewardNormalization:
    grouping: Literal["traj_group_id", "tags", "batch"] = field_help(
        "traj_group_id",
        "which episodes are normalised together: the same initial state (traj_group_id), "
        "the same environment tag, or the whole batch",
    )
    norm_mean_type: Literal["batch", "group"] | None = field_help(
        "group", "subtract the mean of the group or of the batch; null = no centring"
    )
    norm_std_type: Literal["batch", "group"] | None = field_help(
        None, "divide by the std of the group or of the batch; null = no scaling"
    )


def check_agentic(config) -> None:
    """The rules of a config with environments (the agentic kind's, after its roles and RL maths)."""
    from roll.algorithms import get_adv_estimator_spec

    if get_adv_estimator_spec(config.adv_estimator).greedy_baseline:  # e.g. ReMax
        raise ConfigError(
            f"adv_estimator {config.adv_estimator!r} needs the reward of a greedy answer to each prompt as "
            f"baseline, which the agentic pipeline does not generate; choose another estimator (e.g. grpo)"
        )
    if get_adv_estimator_spec(config.adv_estimator).step_rows:
        used = config.train_env_manager.tags
        traj = sorted(tag for tag, env in config.custom_envs.items() if tag in used and not gives_step_rows(env))
        if traj:
            raise ConfigError(
                f"adv_estimator {config.adv_estimator!r} needs one row per turn: set "
                f"custom_envs.<tag>.env_manager: step (or step_concat, agent_native; proxy: "
                f"env_config.trajectory_mode: step) for {traj}"
            )
    if config.partial_rollout and config.async_generation_ratio == 0:
        raise ConfigError(
            "'partial_rollout': true needs async_generation_ratio > 0: only a weight sync during a rollout is "
            "affected by it"
        )
    check_async(config)
    check_stop_strings(config, "actor_infer.generating_args", config.actor_infer.generating_args)
    for key in ("train_env_manager", "val_env_manager"):
        manager = getattr(config, key)
        if manager is not None and manager.generating_args is not None and manager.generating_args.stop_strings:
            # an env manager's sampling overrides carry do_sample/temperature/top_p/top_k only
            raise ConfigError(
                f"'{key}.generating_args.stop_strings': set stop strings on actor_infer.generating_args (they "
                "apply to every environment's turns)"
            )
    if not config.custom_envs:
        raise ConfigError(
            "'custom_envs' is empty: add at least one environment, e.g. custom_envs.FrozenLake with "
            "env_type: frozen_lake (see roll/configs/blocks/traj_envs.yaml)"
        )
    for tag, env in config.custom_envs.items():
        if env.env_manager == "proxy":
            runner_settings = check_proxy_env(tag, env, config)
            if env.env_type is not None:  # the environment roll's EnvRunner plays, built with the runner's settings
                _check_env_config(tag, env, config.prompt_length, runner_settings)
        elif env.agent_runner_cls is not None:
            raise ConfigError(
                f"'custom_envs.{tag}.agent_runner_cls' = {env.agent_runner_cls!r}: an agent runner plays episodes "
                f"only with env_manager: proxy (this environment's is {env.env_manager!r}); remove it or set "
                "env_manager: proxy"
            )
        else:
            _check_env_config(tag, env, config.prompt_length)  # first: an env roll cannot build makes the rest moot
        if env.max_tokens_per_step >= config.response_length:
            raise ConfigError(
                f"'custom_envs.{tag}.max_tokens_per_step' = {env.max_tokens_per_step} must be less "
                f"than response_length = {config.response_length} (a cut reply gets an end-of-turn "
                f"token)"
            )
        if any(m is not None and tag in m.tags for m in (config.train_env_manager, config.val_env_manager)):
            _check_tools(tag, env)  # as ROLL, only the tags an env manager runs get their tools built
        _check_env_templates(tag, env)
    managers = [("train_env_manager", config.train_env_manager)]
    if config.val_env_manager is not None:
        managers.append(("val_env_manager", config.val_env_manager))
    elif config.eval_steps:
        raise ConfigError(
            f"eval_steps = {config.eval_steps} but there is no 'val_env_manager'; add one or set eval_steps: 0"
        )
    for key, manager in managers:
        _check_manager(key, manager, config)
        check_llm_proxy(key, manager.llm_proxy)
    if config.val_batch_size is not None:
        envs = config.val_env_manager.num_envs if config.val_env_manager is not None else 0
        if not envs or config.val_batch_size < envs or config.val_batch_size % envs:
            raise ConfigError(
                f"'val_batch_size' = {config.val_batch_size}, but validation plays whole rounds of one episode per "
                f"val_env_manager environment: num_env_groups × group_size = {envs}; set a multiple of it or remove "
                "val_batch_size"
            )
    train = config.train_env_manager
    if config.rollout_batch_size % train.group_size:
        raise ConfigError(
            f"'rollout_batch_size' = {config.rollout_batch_size} is not a multiple of "
            f"'train_env_manager.group_size' = {train.group_size}"
        )
    if config.rollout_batch_size % train.num_envs:
        raise ConfigError(
            f"'rollout_batch_size' = {config.rollout_batch_size} is not a multiple of the number of "
            f"training environments num_env_groups × group_size = {train.num_envs}; every "
            f"environment runs the same number of episodes per step"
        )
    if train.max_traj_per_env != -1 and config.episodes_per_env > train.max_traj_per_env:
        raise ConfigError(
            f"rollout_batch_size / (num_env_groups × group_size) = {config.episodes_per_env} episodes "
            f"per environment exceeds 'train_env_manager.max_traj_per_env' = {train.max_traj_per_env}; "
            f"raise max_traj_per_env, add environments, or lower rollout_batch_size"
        )
    args, budget = config.actor_infer.generating_args, max(e.max_tokens_per_step for e in config.custom_envs.values())
    if args.max_new_tokens is None:  # each turn passes its env's max_tokens_per_step; this is the default
        args.max_new_tokens = budget
    # else (ROLL's rule): a turn generates at most min(custom_envs.<tag>.max_tokens_per_step, max_new_tokens)


def _check_manager(key: str, manager: EnvManagerConfig, config) -> None:
    if not manager.tags:
        raise ConfigError(
            f"'{key}.tags' is empty: list the custom_envs keys to run (have: {sorted(config.custom_envs)})"
        )
    unknown = [tag for tag in manager.tags if tag not in config.custom_envs]
    if unknown:
        raise ConfigError(
            f"'{key}.tags' names {unknown}, which are not in custom_envs (defined: {sorted(config.custom_envs)})"
        )
    if manager.num_groups_partition is not None:
        if len(manager.num_groups_partition) != len(manager.tags):
            raise ConfigError(
                f"'{key}.num_groups_partition' has {len(manager.num_groups_partition)} entries but "
                f"tags has {len(manager.tags)}; give one count per tag"
            )
        if sum(manager.num_groups_partition) != manager.num_env_groups:
            raise ConfigError(
                f"'{key}.num_groups_partition' = {manager.num_groups_partition} sums to "
                f"{sum(manager.num_groups_partition)}, not num_env_groups = {manager.num_env_groups}"
            )


def group_tags(manager: EnvManagerConfig) -> list[str]:
    """The tag of each env group, in group order (num_groups_partition, or an even split)."""
    counts = manager.num_groups_partition
    if counts is None:
        base, extra = divmod(manager.num_env_groups, len(manager.tags))
        counts = [base + (i < extra) for i in range(len(manager.tags))]
    return [tag for tag, count in zip(manager.tags, counts) for _ in range(count)]


def num_env_workers(manager: EnvManagerConfig) -> int:
    return math.ceil(manager.num_envs / manager.max_env_num_per_worker)


def _check_env_config(tag: str, env: EnvConfig, prompt_length: int, env_kwargs: dict | None = None) -> None:
    """A shipped environment is built once here, so --dry_run reports a bad env_config (a user's dotted-path
    class is only imported by the pipeline); a name that is neither shipped (registered) nor dotted is an error.
    env_kwargs: the constructor's keywords when not env_config itself (the proxy manager's EnvRunner)."""
    from roll.agentic.envs.registry import list_envs, make_env

    if env.env_type is None:
        raise ConfigError(
            f"'custom_envs.{tag}.env_type' is required (env_manager {env.env_manager}): a registered environment "
            f"{list_envs()} or the dotted path of your BaseEnv subclass"
        )
    if env.env_type not in list_envs():
        from roll.configs.roll_compat.env_types import roll_env_refusal

        reason = roll_env_refusal(env.env_type)
        if reason is not None:
            raise ConfigError(f"'custom_envs.{tag}.env_type' = {env.env_type!r} is refused: {reason}")
        if "." not in env.env_type:  # not a dotted class path either: the pipeline could not resolve it
            raise ConfigError(
                f"'custom_envs.{tag}.env_type' = {env.env_type!r}: not an environment roll ships {list_envs()} nor a "
                "dotted class path; give the dotted path of your BaseEnv subclass (ROLL's other environments have "
                "no counterpart here)"
            )
        return
    try:
        built = make_env(env.env_type, dict(env.env_config if env_kwargs is None else env_kwargs))
    except (TypeError, ValueError) as error:
        raise ConfigError(f"'custom_envs.{tag}.env_config': {error}") from None
    least = built.least_observation_tokens()
    if least > prompt_length:  # before any reset builds it
        raise ConfigError(
            f"'custom_envs.{tag}.env_config': its {env.env_type} observations take at least {least:,} "
            f"tokens (one per board cell), more than prompt_length = {prompt_length}, so no first prompt fits; "
            f"make the board smaller"
        )


def _check_tools(tag: str, env: EnvConfig) -> None:
    """Build the tools once (no call is made, no server is asked), so --dry_run reports bad tool_args, a bad
    URL, a missing sandbox layer or a missing mcp package."""
    from roll.agentic.envs.tools import make_tool
    from roll.sandbox import SandboxUnavailable

    if env.tool_wrapper is None:
        return
    where = f"custom_envs.{tag}.tool_wrapper"
    if not env.tool_wrapper.tool_configs:
        raise ConfigError(f"'{where}.tool_configs' is empty: list at least one tool")
    for i, tool in enumerate(env.tool_wrapper.tool_configs):
        try:
            make_tool(tool.tool_id, dict(tool.tool_args), f"{where}.tool_configs[{i}]", f"custom_envs.{tag}").close()
        except (TypeError, ValueError, SandboxUnavailable) as error:
            raise ConfigError(str(error)) from None


TEMPLATE_FIELDS = ("observation", "turn_idx", "actions_left", "max_response_length", "suffix")
# ROLL's StepEnvManager placeholders (its step_envs.yaml template uses all of them)
STEP_TEMPLATE_FIELDS = (
    "env_instruction",
    "history",
    "step_count",
    "history_length",
    "current_step",
    "current_observation",
    "max_response_length",
)
STEP_CONCAT_TEMPLATE_FIELDS = ("history", "current_observation")  # ROLL's StepConcatEnvManager fills only these


def _check_env_templates(tag: str, env: EnvConfig) -> None:
    import re

    where = f"custom_envs.{tag}"
    if env.action_pattern is not None:
        try:
            re.compile(env.action_pattern)
        except re.error as error:
            raise ConfigError(f"'{where}.action_pattern' = {env.action_pattern!r} is not a regex: {error}") from None
    if env.env_manager == "tir" and (env.tool_wrapper is None or not env.tool_wrapper.tool_configs):
        raise ConfigError(f"'{where}.env_manager' = 'tir' runs the calls of tools: set '{where}.tool_wrapper'")
    if env.env_manager == "agent_native":  # ROLL's AgentNativeStepEnvManager reads neither
        unread = [key for key in ("agent_template", "agent_system_template") if getattr(env, key) is not None]
        if unread:
            logger.warning(
                "%s.%s: not read by env_manager agent_native (as ROLL's AgentNativeStepEnvManager): the system "
                "message is the environment's instructions (or env_instruction), each observation is a user message",
                where,
                " and ".join(unread),
            )
        return
    if env.agent_template is None:
        return
    fields = {  # proxy: roll's EnvRunner renders an episode as the traj manager does
        "traj": TEMPLATE_FIELDS,
        "tir": TEMPLATE_FIELDS,
        "proxy": TEMPLATE_FIELDS,
        "step": STEP_TEMPLATE_FIELDS,
        "step_concat": STEP_CONCAT_TEMPLATE_FIELDS,
    }[env.env_manager]
    try:
        env.agent_template.format(**{name: 0 for name in fields})
    except (KeyError, IndexError, ValueError) as error:
        raise ConfigError(
            f"'{where}.agent_template' ({env.env_manager} manager): placeholders may be "
            f"{['{' + n + '}' for n in fields]} ({error!r}); "
            "write literal braces as {{ }}"
        ) from None
    seen = "{observation}" if env.env_manager in (*TRAJECTORY_ROWS, "proxy") else "{current_observation}"
    if seen not in env.agent_template:
        raise ConfigError(f"'{where}.agent_template' has no {seen}: the model would never see the board")
