"""ROLL's mcp tool against a real MCP server (the mcp package's own, over SSE, in a thread on 127.0.0.1)."""

import socket
import threading
import time

import pytest

from roll.agentic.envs import make_env
from roll.agentic.envs.tools import MCPTool, ToolEnv

WHERE = "custom_envs.HotpotQA_with_mcp.tool_wrapper.tool_configs[0]"
ENV = "custom_envs.HotpotQA_with_mcp"


@pytest.fixture(scope="module")
def server_url():
    uvicorn = pytest.importorskip("uvicorn")  # installed with mcp (the test extra)
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("wiki")

    @server.tool()
    def lookup(title: str, limit: int = 1) -> str:
        """Look a title up."""
        if title == "fail":
            raise ValueError("no such page")  # the server answers is_error (and logs the traceback)
        if title == "slow":
            time.sleep(3)
        return f"article about {title} x{limit}"

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    http = uvicorn.Server(
        uvicorn.Config(server.sse_app(), host="127.0.0.1", port=port, log_level="error", timeout_graceful_shutdown=0)
    )
    thread = threading.Thread(target=http.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not http.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert http.started, "the MCP test server did not start"
    yield f"http://127.0.0.1:{port}/sse"
    http.should_exit = True
    thread.join(10)


def test_mcp_tool_lists_and_calls_the_servers_tools(server_url):
    tool = MCPTool(WHERE, env_name=ENV, server_url=server_url, timeout=10)
    env = ToolEnv(make_env("calculator", {}), [tool], tool_reward=0.0, tool_success_reward=0.2, max_tool_uses=None)
    first = env.reset(seed=0)
    assert '"name": "lookup"' in first and '"title"' in first and "<tool_call>" in first  # the server's schema
    result = env.step('<tool_call>{"tool_name": "lookup", "tool_params": {"title": "Paris", "limit": 2}}</tool_call>')
    assert result.observation == "<information>article about Paris x2</information>" and result.reward == 0.2
    failed = env.step('<tool_call>{"tool_name": "lookup", "tool_params": {"title": "fail"}}</tool_call>')
    assert failed.observation == "[Execution Error: Error executing tool lookup]"  # the server's is_error answer
    assert not failed.info["tool_ok"] and failed.reward == 0.0
    for bad, reason in [
        ("{not json", "not JSON"),
        ('{"tool_name": "search", "tool_params": {}}', "unknown tool_name 'search'; the tools: ['lookup']"),
        ('{"tool_name": "lookup", "tool_params": {"limit": 2}}', "'title' is a required property"),
    ]:
        call = tool.call(f"<tool_call>{bad}</tool_call>")
        assert not call.ok and call.observation.startswith("[Validation Error:") and reason in call.observation
    assert tool.call("<answer>7</answer>") is None  # not a call: the environment gets the reply


def test_mcp_failures_name_the_env_and_url_within_the_time_limit(server_url, monkeypatch):
    from roll.agentic.envs.tools import mcp_tool

    warnings = []
    monkeypatch.setattr(mcp_tool.logger, "warning", warnings.append)
    tool = MCPTool(WHERE, env_name=ENV, server_url=server_url, timeout=1)
    tool.instructions()
    start = time.monotonic()
    slow = tool.call('<tool_call>{"tool_name": "lookup", "tool_params": {"title": "slow"}}</tool_call>')
    assert time.monotonic() - start < 2.5
    assert not slow.ok and f"{ENV}: MCP call 'lookup' to {server_url} failed: no answer within 1 s" in slow.observation
    assert warnings and warnings[-1] in slow.observation
    down = MCPTool(WHERE, env_name=ENV, server_url="http://127.0.0.1:9/sse", timeout=1)
    with pytest.raises(RuntimeError, match=rf"{ENV}: cannot list the tools of the MCP server http://127.0.0.1:9/sse"):
        down.instructions()


def test_mcp_tool_args_are_checked_without_contacting_a_server():
    with pytest.raises(ValueError, match=r"server_url = 'xxx': expected the http\(s\) URL of an MCP SSE server"):
        MCPTool(WHERE, server_url="xxx")
    with pytest.raises(ValueError, match=r"tool_names_subset must be a list"):
        MCPTool(WHERE, server_url="http://127.0.0.1:9/sse", tool_names_subset="lookup")
    assert MCPTool(WHERE, server_url="http://127.0.0.1:9/sse").tools is None  # nothing asked yet
