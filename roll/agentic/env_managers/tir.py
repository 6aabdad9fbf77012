"""TIREnvManager (`env_manager: tir`): tool-integrated reasoning, a call executed in the middle of a reply.

ROLL names this manager (roll/pipeline/agentic/env_manager/tir_env_manager.py) but its file is empty; its
tool-integrated recipes run through the GEM tool wrapper, where a reply that holds a call ends the turn and the
output is the next observation. Here, as in ReTool / Search-R1 style rollouts, the reply goes on after the call:
- each generated chunk is searched for the first complete call of custom_envs.<tag>.tool_wrapper's tools (their
  text forms: python_code's <code>…</code> or ```python block, search's <search>…</search>, calculator's
  <calculator>…</calculator>, mcp's <tool_call>…</tool_call>); the chunk is cut after the token that completes
  the call (the tokens the engine generated after it are dropped: a prefix of a sample is a sample of the
  prefix, so its log-probs stand), the call runs (python in roll's kernel sandbox), and its output is inserted
  as context (mask 0: never trained) before generation continues from there, in the same reply;
- a chunk without a call (or once max_tool_uses calls ran) ends the reply; the model's own text of the whole
  reply, the outputs left out, goes to the environment, and the episode goes on as with the traj manager.

Rows are the traj manager's: one per episode, every generated token trained, the inserted outputs and the
observations masked out; the episode's score on the last generated token. Each call earns tool_reward, plus
tool_success_reward when it ran well (wrapper_args). Limits: max_turns, the response budget (an output that does
not fit ends the episode: `length`) and max_episode_seconds (`time`), recorded as `stop_<reason>`.
"""

import time

from roll.agentic.env_managers.base import Turn
from roll.agentic.env_managers.traj import TrajEnvManager
from roll.agentic.envs.tools import make_tools

STOP_REASONS = ("done", "max_turns", "length", "time")


class TIREnvManager(TrajEnvManager):
    wraps_tools = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        wrapper = self.env_config.tool_wrapper
        if wrapper is None or not wrapper.tool_configs:
            raise ValueError(f"custom_envs.{self.tag}: env_manager tir needs tool_wrapper.tool_configs (the tools)")
        self.tools = make_tools(wrapper, self.tag)
        args = wrapper.wrapper_args
        self.tool_reward, self.tool_success_reward = args.tool_reward, args.tool_success_reward
        self.max_tool_uses = args.max_tool_uses

    def user_text(self, observation: str) -> str:
        """The traj manager's first message, then how to call the tools (as the tool wrapper adds them)."""
        text = "\n".join(tool.instructions() for tool in self.tools)
        return f"{super().user_text(observation)}\n{text}"

    def _on_start(self, observation: str) -> None:
        super()._on_start(observation)
        self.started = time.monotonic()
        self.uses = 0
        self.counts = {"tool_calls": 0, "tool_ok": 0, "tool_failed": 0}
        self._new_reply()

    def _new_reply(self) -> None:
        self.reply_prompt: list[int] | None = None  # the context the reply started from
        self.reply_ids, self.reply_log_probs, self.reply_text, self.reply_reward = [], [], [], 0.0

    def apply(self, reply_ids: list[int], log_probs: list[float]) -> None:
        if self.reply_prompt is None:
            self.reply_prompt = list(self._next_prompt())
        ids, log_probs = list(reply_ids), list(log_probs)
        found = self._first_call(ids) if self.max_tool_uses is None or self.uses < self.max_tool_uses else None
        if found is None:  # the reply ends here
            self.trajectory.add_generated(ids, log_probs, self.chat.eos_token_id)
            self._collect(ids, log_probs)
            return self._end_reply()
        tool, cut = found
        ids, log_probs = ids[:cut], log_probs[:cut]
        self.trajectory.add_generated(ids, log_probs, eos_token_id=None)
        self._collect(ids, log_probs)
        call = tool.call(self.chat.decode(ids))
        self.uses += 1
        self.counts["tool_calls"] += 1
        self.counts["tool_ok" if call.ok else "tool_failed"] += 1
        self.reply_reward += self.tool_reward + (self.tool_success_reward if call.ok else 0.0)
        output = call.observation if call.observation[:1].isspace() else f"\n{call.observation}"
        inserted = self.chat.encode(output)
        if self._out_of_time():
            return self._end_reply(stop="time")
        # room for the output, one generated token and the end-of-turn token
        if len(self.trajectory.response_ids) + len(inserted) + 2 > self.response_length:
            return self._end_reply(stop="length")
        self.trajectory.add_context(inserted)

    def _first_call(self, ids: list[int]) -> tuple | None:
        """(tool, number of tokens up to the one that completes the first call) of the chunk, or None."""
        text = self.chat.decode(ids)
        ends = [(end, i) for i, tool in enumerate(self.tools) if (end := tool.locate(text)) is not None]
        if not ends:
            return None
        tool = self.tools[min(ends)[1]]
        low, high = 1, len(ids)  # the shortest prefix whose text holds a complete call: found for `high`
        while low < high:
            middle = (low + high) // 2
            if tool.locate(self.chat.decode(ids[:middle])) is None:
                low = middle + 1
            else:
                high = middle
        return tool, high

    def _collect(self, ids: list[int], log_probs: list[float]) -> None:
        self.reply_ids += ids
        self.reply_log_probs += log_probs
        self.reply_text.append(self.chat.decode(ids))

    def _end_reply(self, stop: str | None = None) -> None:
        """The reply is over: the environment gets its text (unless a limit ended the episode in the middle)."""
        episode, action = self.episode, "".join(self.reply_text)
        if stop is not None:
            turn = Turn(self.observation, self.reply_prompt, self.reply_ids, self.reply_log_probs, action,
                        self.reply_reward, True)  # fmt: skip
            episode.turns.append(turn)
            self._new_reply()
            return self._finish(stop, False)
        result = self.env.step(self.parse_action(action))
        self.suffix = str(result.info.get("suffix", ""))
        valid = bool(result.info.get("action_is_valid", True))
        reward = self.reply_reward + float(result.reward) + (0.0 if valid else self.format_penalty)
        episode.turns.append(
            Turn(self.observation, self.reply_prompt, self.reply_ids, self.reply_log_probs, action, reward, valid)
        )
        self._new_reply()
        if result.done:
            return self._finish("done", bool(result.info.get("success", False)))
        if len(episode.turns) >= self.env_config.max_turns:
            return self._finish("max_turns", False)
        if self._out_of_time():
            return self._finish("time", False)
        self.observation = result.observation
        if not self._on_observation(result.observation):
            self._finish("length", False)

    def _out_of_time(self) -> bool:
        limit = self.env_config.max_episode_seconds
        return limit is not None and time.monotonic() - self.started > limit

    def _finish(self, reason: str, success: bool) -> None:
        super()._finish(reason, success)
        self.episode.extra = {
            **self.counts,
            "seconds": round(time.monotonic() - self.started, 3),
            **{f"stop_{name}": float(name == reason) for name in STOP_REASONS},
        }

    def close(self) -> None:
        for tool in self.tools:
            tool.close()
        super().close()
