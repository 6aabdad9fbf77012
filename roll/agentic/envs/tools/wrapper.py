"""ToolEnv: ROLL's tool wrapper around an environment (custom_envs.<tag>.tool_wrapper).

Each reply is offered to the tools first, while the episode has tool uses left: a reply that holds a call is
answered by the tool (its output is the next observation, the environment does not step) and earns
tool_reward, plus tool_success_reward when the tool ran without error. A reply with no call goes to the
environment. The tools' instructions follow the first observation."""

from roll.agentic.envs.base import BaseEnv, EnvStep
from roll.agentic.envs.tools.base import Tool, ToolCall

# appended to the call that uses the last tool call (ROLL appends such a note too)
MAX_USES_NOTE = "\n\nThat was your last tool call: give your final answer now."


class ToolEnv(BaseEnv):
    def __init__(
        self,
        env: BaseEnv,
        tools: list[Tool],
        tool_reward: float = 0.05,
        tool_success_reward: float = 0.25,
        max_tool_uses: int | None = 10,
    ):
        # not BaseEnv.__init__: the wrapped env checked its own env_config
        self.env, self.tools = env, tools
        self.config, self.instructions, self.action_pattern = env.config, env.instructions, env.action_pattern
        self.tool_reward, self.tool_success_reward = tool_reward, tool_success_reward
        self.max_tool_uses = max_tool_uses  # None = no cap
        self.uses = self.successes = 0

    def reset(self, seed: int) -> str:
        self.uses = self.successes = 0
        observation = self.env.reset(seed=seed)
        text = "\n".join(tool.instructions() for tool in self.tools)
        if len(self.tools) > 1:
            text = f"Available tools:\n{text}"
        return f"{observation}\n{text}"

    def reset_suffix(self) -> str:
        return self.env.reset_suffix()

    def step(self, action: str) -> EnvStep:
        call, tool = self._call_tools(action)
        if call is None:
            result = self.env.step(action)
            result.info.update(self._counters(tool_used=False))
            return result
        self.uses += 1
        self.successes += call.ok
        observation = call.observation
        if self.max_tool_uses is not None and self.uses == self.max_tool_uses:
            observation += MAX_USES_NOTE
        reward = self.tool_reward + (self.tool_success_reward if call.ok else 0.0)
        info = {"action_is_valid": True, "success": False, "tool_id": tool.tool_id, "tool_ok": call.ok}
        info.update(self._counters(tool_used=True))
        return EnvStep(observation, reward, False, info)

    def _call_tools(self, action: str) -> tuple[ToolCall | None, Tool | None]:
        """The first tool call that ran well, else the first that was made (and failed); (None, None) when the
        reply calls no tool or the uses are spent."""
        if self.max_tool_uses is not None and self.uses >= self.max_tool_uses:
            return None, None
        first = (None, None)
        for tool in self.tools:
            call = tool.call(action)
            if call is not None and call.ok:
                return call, tool
            if call is not None and first[0] is None:
                first = (call, tool)
        return first

    def _counters(self, tool_used: bool) -> dict:
        return {"tool_used": tool_used, "tool_use_counter": self.uses, "tool_success_counter": self.successes}

    def close(self) -> None:
        for tool in self.tools:
            tool.close()
        self.env.close()
