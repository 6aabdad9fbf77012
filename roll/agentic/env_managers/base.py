"""One env manager drives one environment instance through episodes, turn by turn.

The loop is driven from outside (the environment worker, on behalf of the pipeline's rollout):
    manager.start(seed, group_id, traj_id)
    while (prompt := manager.request()) is not None:    # token ids for the next reply
        manager.apply(reply_ids, reply_log_probs)         # decode → env.step → next observation
    manager.samples()                                     # training rows of the finished episode

Subclasses decide what the model sees (`request`) and what becomes a training sample (`samples`):
`TrajEnvManager` (one sample per trajectory) and `StepEnvManager` (one sample per turn).
"""

from dataclasses import dataclass, field
from typing import ClassVar

from roll.agentic.env_managers.chat import ChatTokens
from roll.agentic.envs import make_env
from roll.agentic.envs.tools import wrap_with_tools
from roll.agentic.envs.turn_text import compile_action_pattern, fill_template, parse_action, with_instructions


@dataclass
class Turn:
    observation: str  # what the model answered to
    prompt_ids: list[int]  # the exact ids the reply was generated from
    reply_ids: list[int]  # the exact ids the engine generated
    log_probs: list[float]  # the engine's log-prob of each reply id
    action: str  # the decoded reply given to the environment
    reward: float  # environment reward + format penalty of this turn
    valid: bool  # the reply matched the environment's action pattern


@dataclass
class Episode:
    seed: int
    group_id: str
    traj_id: str
    turns: list[Turn] = field(default_factory=list)
    done: bool = False
    success: bool = False
    end_reason: str = ""  # "done" (the env ended it), "max_turns", "length" (token budget) or "time"
    extra: dict = field(default_factory=dict)  # a manager's own per-episode numbers (tool calls ...), logged too

    @property
    def score(self) -> float:
        return sum(turn.reward for turn in self.turns)

    def stats(self) -> dict:
        return {
            "success": float(self.success),
            "score": self.score,
            "num_turns": len(self.turns),
            "invalid_actions": sum(not t.valid for t in self.turns),
            "truncated": float(self.end_reason == "length"),
            **self.extra,
        }


class EnvManager:
    # custom_envs.<tag>.tool_wrapper wraps the environment (ROLL's GEM tool wrapper: a reply that calls a tool is
    # answered by it instead of the env); managers that call the tools themselves set False
    wraps_tools: ClassVar[bool] = True
    # False for a manager whose episodes an outside agent plays (the proxy manager): the driver cannot build its
    # first prompt, so the first-prompt check and the weight-sync probe do not start one
    plays_in_driver: ClassVar[bool] = True

    def __init__(
        self,
        env_id: int,
        tag: str,
        env_config,
        chat: ChatTokens,
        format_penalty: float,
        prompt_length: int,
        response_length: int,
        gamma: float = 1.0,
        env_cls=None,
        manager_config=None,
    ):
        self.env_id, self.tag, self.env_config, self.chat = env_id, tag, env_config, chat
        self.gamma = gamma  # step manager: discount of later turns' rewards
        # the environment's own penalty (custom_envs.<tag>.format_penalty) wins over the env manager's
        self.format_penalty = format_penalty if env_config.format_penalty is None else env_config.format_penalty
        self.action_re = compile_action_pattern(env_config)
        self.prompt_length, self.response_length = prompt_length, response_length
        # env_cls: the class the driver resolved (a user's class arrives by value, needing no import here)
        self.env = (
            env_cls(**env_config.env_config)
            if env_cls is not None
            else make_env(env_config.env_type, dict(env_config.env_config))
        )
        if env_config.tool_wrapper is not None and self.wraps_tools:  # tools answer calls before the env steps
            self.env = wrap_with_tools(self.env, env_config.tool_wrapper, tag)
        self.episode: Episode | None = None
        self.observation = ""

    @property
    def max_new_tokens(self) -> int:
        return self.env_config.max_tokens_per_step

    def start(self, seed: int, group_id: str, traj_id: str) -> None:
        self.episode = Episode(seed=seed, group_id=group_id, traj_id=traj_id)
        self.observation = self.env.reset(seed=seed)
        # the last step's info["suffix"] (at the start, the env's reset_suffix): an env's state string for the
        # {suffix} placeholder and step_concat's current observation
        self.suffix = self.env.reset_suffix()
        self._on_start(self.observation)

    def user_text(self, observation: str) -> str:
        """The environment's instructions, then this turn's text."""
        instructions = self.env_config.env_instruction or getattr(self.env, "instructions", "")
        return with_instructions(instructions, self.turn_text(observation))

    def turn_text(self, observation: str) -> str:
        """The observation, or custom_envs.<tag>.agent_template filled in (ROLL's placeholders)."""
        taken = len(self.episode.turns) if self.episode is not None else 0
        return fill_template(
            self.env_config.agent_template, observation, taken, self.env_config, getattr(self, "suffix", "")
        )

    def system_text(self) -> str | None:
        return self.env_config.agent_system_template or None

    def parse_action(self, reply: str) -> str:
        """What the environment gets: the reply, or the last group action_pattern matched ('' if none)."""
        return parse_action(self.action_re, reply)

    def request(self) -> list[int] | None:
        """Token ids to generate the next reply from, or None when the episode is over."""
        if self.episode is None or self.episode.done:
            return None
        return self._next_prompt()

    def apply(self, reply_ids: list[int], log_probs: list[float]) -> None:
        episode, prompt = self.episode, self._next_prompt()
        action = self.chat.decode(reply_ids)
        result = self.env.step(self.parse_action(action))
        self.suffix = str(result.info.get("suffix", ""))
        valid = bool(result.info.get("action_is_valid", True))
        reward = float(result.reward) + (0.0 if valid else self.format_penalty)
        episode.turns.append(Turn(self.observation, prompt, list(reply_ids), list(log_probs), action, reward, valid))
        self._on_reply(reply_ids, log_probs)
        if result.done:
            self._finish("done", bool(result.info.get("success", False)))
        elif len(episode.turns) >= self.env_config.max_turns:
            self._finish("max_turns", False)
        else:
            self.observation = result.observation
            if not self._on_observation(result.observation):
                self._finish("length", False)

    def _finish(self, reason: str, success: bool) -> None:
        self.episode.done, self.episode.end_reason, self.episode.success = True, reason, success

    def close(self) -> None:
        self.env.close()

    # ---- what a manager kind decides ---------------------------------------------------------------
    def _on_start(self, observation: str) -> None:
        pass

    def _next_prompt(self) -> list[int]:
        raise NotImplementedError

    def _on_reply(self, reply_ids: list[int], log_probs: list[float]) -> None:
        pass

    def _on_observation(self, observation: str) -> bool:
        """Take in the next observation; False when the next turn would not fit the token budget."""
        return True

    def samples(self) -> list[dict]:
        """Training rows of the finished episode: prompt_ids, response_ids, response_mask, rollout_log_probs,
        score (the reward placed on the last generated token), plus the episode's bookkeeping."""
        raise NotImplementedError

    def _row(self, prompt_ids, response_ids, mask, log_probs, score: float, **extra) -> dict:
        episode = self.episode
        return {
            **episode.stats(),
            "episode_score": episode.score,
            **extra,
            "prompt_ids": list(prompt_ids),
            "response_ids": list(response_ids),
            "response_mask": list(mask),
            "rollout_log_probs": list(log_probs),
            "score": float(score),
            "tag": self.tag,
            "traj_group_id": episode.group_id,
            "traj_id": episode.traj_id,
            "env_id": self.env_id,
        }
