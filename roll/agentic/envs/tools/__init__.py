"""ROLL's tool wrapper (custom_envs.<tag>.tool_wrapper): tools by ROLL's tool_id, and the env that offers them."""

from roll.agentic.envs.base import BaseEnv
from roll.agentic.envs.tools.base import Tool, ToolCall
from roll.agentic.envs.tools.calculator import CalculatorTool
from roll.agentic.envs.tools.mcp_tool import MCPTool
from roll.agentic.envs.tools.python_code import PythonCodeTool
from roll.agentic.envs.tools.search import SearchTool
from roll.agentic.envs.tools.wrapper import ToolEnv

TOOLS: dict[str, type[Tool]] = {
    "python_code": PythonCodeTool,
    "search": SearchTool,
    "mcp": MCPTool,
    "calculator": CalculatorTool,
}
REMOTE = (SearchTool, MCPTool)  # their failures name the environment


def make_tool(tool_id: str, tool_args: dict, where: str, env_name: str) -> Tool:
    if tool_id not in TOOLS:
        raise ValueError(f"{where}.tool_id = {tool_id!r}: choose one of {sorted(TOOLS)}")
    if issubclass(TOOLS[tool_id], REMOTE):
        return TOOLS[tool_id](where, env_name=env_name, **tool_args)
    return TOOLS[tool_id](where, **tool_args)


def make_tools(tool_wrapper, tag: str) -> list[Tool]:
    """The tools of custom_envs.<tag>.tool_wrapper (as loaded: tool_configs[i].tool_id / tool_args), in order."""
    where = f"custom_envs.{tag}.tool_wrapper"
    return [
        make_tool(c.tool_id, dict(c.tool_args), f"{where}.tool_configs[{i}]", f"custom_envs.{tag}")
        for i, c in enumerate(tool_wrapper.tool_configs)
    ]


def wrap_with_tools(env: BaseEnv, tool_wrapper, tag: str) -> ToolEnv:
    """`tool_wrapper`: custom_envs.<tag>.tool_wrapper as loaded (wrapper_args, tool_configs[i].tool_id/tool_args)."""
    tools = make_tools(tool_wrapper, tag)
    args = tool_wrapper.wrapper_args
    return ToolEnv(env, tools, args.tool_reward, args.tool_success_reward, args.max_tool_uses)


__all__ = [
    "Tool",
    "ToolCall",
    "ToolEnv",
    "PythonCodeTool",
    "CalculatorTool",
    "SearchTool",
    "MCPTool",
    "TOOLS",
    "make_tool",
    "make_tools",
    "wrap_with_tools",
]
