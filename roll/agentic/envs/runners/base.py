"""Agent runners (ROLL's AgentRunner): the program that plays one episode through roll's OpenAI-compatible
endpoint while the proxy env manager (roll.agentic.env_managers.proxy) serves and records its requests.

A runner is built for each episode with the endpoint's address and the episode's token, plays the episode in
`run_job(seed)` — every model call a `POST {base_url}/chat/completions` with `Authorization: Bearer {api_key}` —
and returns an `EpisodeResult` whose score trains the policy. It never sees a tokenizer or a training row.
"""

from dataclasses import dataclass, field
from typing import Any, ClassVar

from roll.utils.import_utils import import_class


@dataclass
class EpisodeResult:
    """What a runner reports for one episode (ROLL's fields, plus `success`)."""

    score: float  # the episode's reward
    success: bool | None = None  # the task solved; None = score > 0
    status: str = "Finished"  # ROLL's: Finished | Failed (an error the agent caught) | NoData
    agent_exit_reason: str = ""  # why the agent stopped, if not by finishing the task
    step_scores: list[float] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)  # reward_granularity may name one of them


class AgentFailed(RuntimeError):
    """The agent program failed (crashed, exited with an error, wrote no result); its message is recorded as the
    episode's agent_exit_reason."""


class AgentRunner:
    """Subclass it, list your settings with their defaults in `default_config` (custom_envs.<tag>.env_config gives
    them; unknown keys are errors), and implement `run_job`. One instance plays one episode, in a thread of the
    environment worker; `cancel()` is called from another thread when the episode times out."""

    default_config: ClassVar[dict[str, Any]] = {}
    # True: custom_envs.<tag>.env_type names the environment it plays (built for it as `env_cls`), and the
    # environment's constructor takes env_config; False: env_type must stay unset
    plays_env: ClassVar[bool] = False

    def __init__(
        self,
        base_url: str,
        api_key: str,
        env_id: int,
        env_config,
        config: dict[str, Any],
        env_cls=None,
        format_penalty: float = 0.0,
        tag: str = "",
    ):
        """base_url: the endpoint, e.g. http://127.0.0.1:41234/v1 (an OpenAI client's base_url); api_key: this
        episode's token (valid only while the episode runs); env_config: custom_envs.<tag> as loaded; config: its
        env_config merged over `default_config`; env_cls: the environment class (plays_env runners); tag: the
        custom_envs key."""
        self.base_url, self.api_key, self.env_id = base_url, api_key, env_id
        self.env_config, self.config = env_config, config
        self.env_cls, self.format_penalty, self.tag = env_cls, format_penalty, tag

    @classmethod
    def check_config(cls, settings: dict) -> dict:
        """`settings` merged over default_config; an unknown key is a ValueError naming the valid ones."""
        unknown = sorted(set(settings) - set(cls.default_config))
        if unknown:
            raise ValueError(
                f"{cls.__name__}: unknown env_config key(s) {unknown}; valid keys: {sorted(cls.default_config)}"
            )
        return {**cls.default_config, **settings}

    def run_job(self, seed: int) -> EpisodeResult:
        raise NotImplementedError

    def cancel(self) -> None:  # noqa: B027 - optional: stop what can be stopped (a program runner kills its process)
        pass

    def teardown(self) -> None:  # noqa: B027 - optional: release what run_job holds
        pass


def resolve_runner_class(path: str) -> type[AgentRunner]:
    """custom_envs.<tag>.agent_runner_cls → the class; a ValueError/ImportError/TypeError names what is wrong."""
    if not isinstance(path, str) or "." not in path:
        raise ValueError(f"{path!r} is not a dotted class path such as 'my_pkg.agents.MyRunner'")
    cls = import_class(path)
    if not (isinstance(cls, type) and issubclass(cls, AgentRunner)):
        raise TypeError(f"{path!r} resolves to {cls!r}, not a subclass of roll.agentic.envs.runners.AgentRunner")
    return cls


def as_result(value) -> EpisodeResult:
    """run_job's return value: an EpisodeResult, or a dict with its fields (score required)."""
    if isinstance(value, EpisodeResult):
        return value
    if isinstance(value, dict) and "score" in value:
        known = {k: value[k] for k in ("score", "success", "status", "agent_exit_reason", "step_scores") if k in value}
        rest = {k: v for k, v in value.items() if k not in known and k != "metrics"}
        return EpisodeResult(**known, metrics={**rest, **value.get("metrics", {})})
    raise AgentFailed(f"run_job returned {type(value).__name__}, not an EpisodeResult or a dict with a 'score'")
