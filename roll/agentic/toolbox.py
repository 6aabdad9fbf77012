"""The functions one episode may call natively: the function forms of custom_envs.<tag>.tool_wrapper's tools
(python_code → `python`, search → `search`, calculator → `calculator`, mcp → the server's own tools), looked up
by name, their arguments checked against the declared schema before anything runs."""

from dataclasses import dataclass

from roll.agentic.envs.tools import Tool
from roll.agentic.envs.tools.functions import check_arguments
from roll.agentic.tool_calls import FunctionCall


@dataclass
class CallResult:
    content: str  # the `tool` message the model reads
    status: str  # "ok", "failed" (the tool ran and reported an error) or "malformed" (nothing ran)


class Toolbox:
    def __init__(self, tools: list[Tool], where: str):
        self.tools, self.where = tools, where
        self._schemas: list[dict] | None = None
        self._owner: dict[str, tuple[Tool, dict]] = {}

    def schemas(self) -> list[dict]:
        """The function declarations, listed once (an MCP server is asked at the first episode's start)."""
        if self._schemas is None:
            schemas, owner = [], {}
            for tool in self.tools:
                for schema in tool.functions():
                    name = schema["function"]["name"]
                    if name in owner:
                        raise ValueError(
                            f"{self.where}.tool_wrapper: two tools declare a function named {name!r} "
                            f"({owner[name][0].tool_id} and {tool.tool_id}); keep one of them"
                        )
                    owner[name] = (tool, schema["function"].get("parameters") or {})
                    schemas.append(schema)
            self._schemas, self._owner = schemas, owner
        return self._schemas

    def run(self, call: FunctionCall) -> CallResult:
        self.schemas()
        if call.name not in self._owner:
            names = sorted(self._owner)
            offer = f"the functions are {names}" if names else "no functions are offered here"
            return CallResult(f"Error: there is no function named {call.name!r}; {offer}.", "malformed")
        tool, parameters = self._owner[call.name]
        problem = check_arguments(call.arguments, parameters)
        if problem is not None:
            return CallResult(f"Error: {call.name}: {problem}.", "malformed")
        try:
            result = tool.invoke(call.name, call.arguments)
        except ValueError as error:  # the tool's own check of the arguments
            return CallResult(f"Error: {call.name}: {error}.", "malformed")
        return CallResult(result.observation, "ok" if result.ok else "failed")

    def close(self) -> None:
        for tool in self.tools:
            tool.close()
