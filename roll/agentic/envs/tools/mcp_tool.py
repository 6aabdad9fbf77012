"""ROLL's mcp tool: the tools of a Model Context Protocol server (ROLL's client speaks its SSE transport at
server_url). At an episode's start the server's tool list becomes the instructions; the model calls one as
<tool_call>{"tool_name": …, "tool_params": {…}}</tool_call>, checked against the tool's JSON schema before it
is sent. The answer's text comes back inside <information>…</information>, an error as [Execution Error: …].

Every exchange with the server (tool list, call) has a time limit (tool_args.timeout). A failed call does not
stop the episode: the model reads the error, which names the environment and the URL, and it is logged. A
server that cannot list its tools when an episode starts is an error (the episode cannot say what to call).
Needs the `mcp` package (`pip install -e ".[mcp]"`); without it the tool is refused when the config loads."""

import asyncio
import json
import re
from urllib.parse import urlparse

from roll.agentic.envs.tools.base import Tool, ToolCall
from roll.utils.logging import get_logger

logger = get_logger("roll.agentic")
CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


class MCPTool(Tool):
    tool_id = "mcp"
    contacts_at_reset = True
    default_args = {
        "server_url": None,  # the server's SSE endpoint (ROLL's key), e.g. http://host:8000/sse
        "tool_names_subset": None,  # null = every tool the server lists
        "custom_prompt": None,  # null = instructions written from the tool list
        "num_workers": 1,  # ROLL's (GEM's) worker count; a call here is one request
        "timeout": 30,  # seconds for one exchange with the server (connect + list or call)
    }

    def __init__(self, where: str, env_name: str = "", **tool_args):
        super().__init__(where, **tool_args)
        try:
            import jsonschema  # noqa: F401  (mcp depends on it)
            import mcp  # noqa: F401
        except ImportError as error:
            raise ValueError(
                f"{where}.tool_id = 'mcp' needs the mcp package ({error}); install roll with the mcp extra: "
                'pip install -e ".[mcp]"'
            ) from None
        self.env_name = env_name or where
        url = self.optional_str("server_url")
        parsed = urlparse(url or "")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"{where}.tool_args.server_url = {url!r}: expected the http(s) URL of an MCP SSE server")
        self.url = url
        subset = self.args["tool_names_subset"]
        if subset is not None and not (isinstance(subset, list) and all(isinstance(n, str) for n in subset)):
            raise ValueError(
                f"{where}.tool_args.tool_names_subset must be a list of tool names or null, got {subset!r}"
            )
        self.custom_prompt = self.optional_str("custom_prompt")
        self.timeout = self.positive_number("timeout")
        self.positive_int("num_workers")
        self.tools: list[dict] | None = None  # name, description, input_schema of each server tool, once listed

    # ---- the server ---------------------------------------------------------------------------------
    def _exchange(self, work):
        """Run `work(session)` on a fresh session with the server, within the time limit."""
        from mcp import ClientSession
        from mcp.client.sse import sse_client

        async def run():
            async with sse_client(self.url, timeout=self.timeout, sse_read_timeout=self.timeout) as streams:
                async with ClientSession(*streams, read_timeout_seconds=self.timeout) as session:
                    await session.initialize()
                    return await work(session)

        async def limited():
            return await asyncio.wait_for(run(), self.timeout)

        return asyncio.run(limited())

    def _list_tools(self) -> list[dict]:
        async def work(session):
            return (await session.list_tools()).tools

        try:
            listed = self._exchange(work)
        except BaseException as error:  # noqa: BLE001 - anything the transport raises, also a time-out
            if isinstance(error, KeyboardInterrupt):
                raise
            raise RuntimeError(f"{self.env_name}: cannot list the tools of the MCP server {self.url}: "
                               f"{_describe(error, self.timeout)}") from None  # fmt: skip
        tools = [
            {
                "name": tool.name,
                "description": tool.description or "",
                "input_schema": getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", {}) or {},
            }
            for tool in listed
        ]
        subset = self.args["tool_names_subset"]
        return [t for t in tools if subset is None or t["name"] in subset]

    # ---- the tool -----------------------------------------------------------------------------------
    def instructions(self) -> str:
        if self.tools is None:
            self.tools = self._list_tools()
        if self.custom_prompt:
            return self.custom_prompt
        if not self.tools:
            return "The tool server offers no tools."
        example = {"tool_name": self.tools[0]["name"], "tool_params": {}}
        return (
            "You can call these tools (name, description, and the JSON schema of their parameters):\n"
            f"{json.dumps(self.tools, indent=2, ensure_ascii=False)}\n"
            "To call one, reply with a single JSON object between <tool_call> and </tool_call>, with the keys "
            '"tool_name" (one of the names above) and "tool_params" (an object that fits its schema), e.g.\n'
            f"<tool_call>{json.dumps(example)}</tool_call>"
        )

    def locate(self, text: str) -> int | None:
        match = CALL_RE.search(text)
        return None if match is None else match.end()

    def call(self, action: str) -> ToolCall | None:
        match = CALL_RE.search(action)
        if match is None:
            return None
        parsed_action = action[: match.end()]
        try:
            name, params = self._validate(match.group(1).strip())
        except ValueError as error:
            return ToolCall(f"[Validation Error: the tool call is not valid: {error}]", False, parsed_action)
        return self._call(name, params, parsed_action)

    # native tool calling: the server's tools, each a function with its own parameter schema
    def functions(self) -> list[dict]:
        if self.tools is None:
            self.tools = self._list_tools()
        return [
            {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": t["input_schema"] or {"type": "object"}}}
            for t in self.tools
        ]  # fmt: skip

    def invoke(self, name: str, arguments: dict) -> ToolCall:
        # the server's schemas may use all of JSON Schema: checked with jsonschema (ValueError: they do not fit)
        name, params = self._validate(json.dumps({"tool_name": name, "tool_params": arguments}))
        return self._call(name, params, "", wrap=False)

    def _call(self, name: str, params: dict, parsed_action: str, wrap: bool = True) -> ToolCall:
        async def work(session):
            return await session.call_tool(name, params)

        try:
            result = self._exchange(work)
        except BaseException as error:  # noqa: BLE001
            if isinstance(error, KeyboardInterrupt):
                raise
            message = f"{self.env_name}: MCP call {name!r} to {self.url} failed: {_describe(error, self.timeout)}"
            logger.warning(message)
            return ToolCall(f"[Execution Error: {message}]", False, parsed_action)
        text = "\n".join(
            item.text for item in (result.content or []) if getattr(item, "type", None) == "text" and item.text
        ).strip()
        if getattr(result, "is_error", getattr(result, "isError", False)):
            return ToolCall(f"[Execution Error: {text or 'the server reported an error without details'}]", False,
                            parsed_action)  # fmt: skip
        text = text or "The tool ran and returned no text."
        return ToolCall(f"<information>{text}</information>" if wrap else text, True, parsed_action)

    def _validate(self, content: str) -> tuple[str, dict]:
        import jsonschema

        try:
            data = json.loads(content)
        except json.JSONDecodeError as error:
            raise ValueError(f"not JSON ({error})") from None
        if not isinstance(data, dict) or not isinstance(data.get("tool_name"), str):
            raise ValueError('expected {"tool_name": "<name>", "tool_params": {...}}')
        params = data.get("tool_params", {})
        if not isinstance(params, dict):
            raise ValueError("tool_params must be an object")
        if self.tools is None:
            self.tools = self._list_tools()
        schema = next((t["input_schema"] for t in self.tools if t["name"] == data["tool_name"]), None)
        if schema is None:
            raise ValueError(f"unknown tool_name {data['tool_name']!r}; the tools: {[t['name'] for t in self.tools]}")
        try:
            jsonschema.validate(params, schema)
        except jsonschema.ValidationError as error:
            raise ValueError(f"tool_params do not fit the schema of {data['tool_name']!r}: {error.message}") from None
        return data["tool_name"], params


def _describe(error: BaseException, timeout: float) -> str:
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        return f"no answer within {timeout:g} s (tool_args.timeout)"
    inner = getattr(error, "exceptions", None)  # an exception group from the transport's task group
    if inner:
        return _describe(inner[0], timeout)
    return f"{type(error).__name__}: {error}"
