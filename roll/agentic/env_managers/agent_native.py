"""AgentNativeEnvManager (`env_manager: agent_native`, ROLL's AgentNativeStepEnvManager): native tool calling.

The tools are declared as JSON-schema functions (the function forms of custom_envs.<tag>.tool_wrapper's tools)
and rendered by the tokenizer's chat template (`apply_chat_template(..., tools=...)`), with the environment's
instructions as the system message and its observation as the first user message. Each reply is parsed from
the decoded text of the tokens the engine generated (roll.agentic.tool_calls):
- a reply that calls tools: each call runs (roll.agentic.toolbox) and its result comes back as a `tool`
  message; the environment does not step. A malformed call (not JSON, an unknown function, arguments that do
  not fit the schema, an unclosed call) is answered with an error message the model reads, runs nothing, and
  is counted (`tool_malformed`); the turn is an invalid action. The turn earns the wrapper's tool_reward, plus
  tool_success_reward when every call ran well (ROLL's wrapper_args; max_tool_uses caps the tool turns, after
  which replies go to the environment);
- any other reply goes to the environment (custom_envs.<tag>.action_pattern applies), whose observation is the
  next user message.

Token in, token out: the context is the first prompt, then exactly the ids the engine generated, then the
template's tokens for the tool or user messages (`ChatTokens.continuation_ids`); earlier replies are never
re-rendered. Rows are ROLL's: one per turn, its prompt the context the reply was generated from, its response
that reply (so tool results, always in a prompt, are never trained), its score the turn's discounted return
(step_reward_gamma), as the step manager.

Limits, each ending the episode with its stop reason recorded (`stop_<reason>` metrics, `Episode.end_reason`):
max_turns (`max_turns`), the context reaching prompt_length (`length`), max_episode_seconds of wall clock
(`time`); the environment ending it is `done`.
"""

import time

from roll.agentic.env_managers.base import Turn
from roll.agentic.env_managers.chat import TokenTrajectory
from roll.agentic.env_managers.step import StepEnvManager
from roll.agentic.envs.tools import make_tools
from roll.agentic.tool_calls import assistant_message, parse_tool_calls, tool_message
from roll.agentic.toolbox import Toolbox

STOP_REASONS = ("done", "max_turns", "length", "time")


class AgentNativeEnvManager(StepEnvManager):
    wraps_tools = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        wrapper = self.env_config.tool_wrapper
        self.toolbox = Toolbox(make_tools(wrapper, self.tag) if wrapper is not None else [], f"custom_envs.{self.tag}")
        args = wrapper.wrapper_args if wrapper is not None else None
        self.tool_reward = args.tool_reward if args is not None else 0.0
        self.tool_success_reward = args.tool_success_reward if args is not None else 0.0
        self.max_tool_uses = args.max_tool_uses if args is not None else None

    @property
    def max_new_tokens(self) -> int:
        return max(1, min(self.env_config.max_tokens_per_step, self.response_length - 1))

    def _on_start(self, observation: str) -> None:
        super()._on_start(observation)
        self.started = time.monotonic()
        self.tool_turns = 0
        self.counts = {"tool_calls": 0, "tool_ok": 0, "tool_failed": 0, "tool_malformed": 0}
        self.schemas = self.toolbox.schemas() or None
        system = self.env_config.env_instruction or getattr(self.env, "instructions", "") or None
        prompt = self.chat.prompt_ids(observation, system, tools=self.schemas)
        if len(prompt) > self.prompt_length:
            raise ValueError(
                f"custom_envs.{self.tag}: the first prompt (system message, tools and first observation) has "
                f"{len(prompt)} tokens, more than prompt_length = {self.prompt_length}; raise prompt_length"
            )
        self.trajectory = TokenTrajectory(prompt_ids=prompt)

    def _next_prompt(self) -> list[int]:
        return self.trajectory.context_ids

    def apply(self, reply_ids: list[int], log_probs: list[float]) -> None:
        episode, prompt = self.episode, list(self._next_prompt())
        text = self.chat.decode(reply_ids)
        parsed = parse_tool_calls(text)
        self.trajectory.add_generated(reply_ids, log_probs, self.chat.eos_token_id)
        reply = assistant_message(parsed)
        if parsed.has_calls and (self.max_tool_uses is None or self.tool_turns < self.max_tool_uses):
            messages, reward, valid = self._run_calls(parsed)
            observation = "\n".join(m["content"] for m in messages)
            done = success = False
        else:
            result = self.env.step(self.parse_action(text))
            self.suffix = str(result.info.get("suffix", ""))
            valid = bool(result.info.get("action_is_valid", True))
            reward = float(result.reward) + (0.0 if valid else self.format_penalty)
            observation, done = result.observation, result.done
            success = bool(result.info.get("success", False))
            messages = [{"role": "user", "content": observation}]
        episode.turns.append(Turn(self.observation, prompt, list(reply_ids), list(log_probs), text, reward, valid))
        if done:
            return self._finish("done", success)
        if len(episode.turns) >= self.env_config.max_turns:
            return self._finish("max_turns", False)
        if self._out_of_time():
            return self._finish("time", False)
        ids = self.chat.continuation_ids(messages, reply, tools=self.schemas)
        if len(self.trajectory.context_ids) + len(ids) + 1 > self.prompt_length:  # no room for the next prompt
            return self._finish("length", False)
        self.trajectory.add_context(ids)
        self.observation = observation

    def _run_calls(self, parsed) -> tuple[list[dict], float, bool]:
        """(the `tool` messages answering the reply's calls in order, the turn's reward, no call was malformed)."""
        self.tool_turns += 1
        messages, statuses = [], []
        for item in parsed.items:
            if isinstance(item, str):  # malformed: answered, nothing runs
                content, status, name = f"Error: {item}.", "malformed", None
            else:
                result = self.toolbox.run(item)
                content, status, name = result.content, result.status, item.name
            statuses.append(status)
            messages.append(tool_message(content, name))
        self.counts["tool_calls"] += len(statuses)
        for status in statuses:
            self.counts[f"tool_{status}"] += 1
        all_ok = all(status == "ok" for status in statuses)
        return messages, self.tool_reward + (self.tool_success_reward if all_ok else 0.0), "malformed" not in statuses

    def _out_of_time(self) -> bool:
        limit = self.env_config.max_episode_seconds
        return limit is not None and time.monotonic() - self.started > limit

    def _finish(self, reason: str, success: bool) -> None:
        super()._finish(reason, success)
        self.episode.extra = {
            **self.counts,
            "tool_turns": self.tool_turns,
            "seconds": round(time.monotonic() - self.started, 3),
            **{f"stop_{name}": float(name == reason) for name in STOP_REASONS},
        }

    def close(self) -> None:
        self.toolbox.close()
        super().close()
