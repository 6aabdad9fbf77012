"""ROLL's tool wrapper (custom_envs.<tag>.tool_wrapper): the python_code tool runs in roll's kernel sandbox, the
search tool asks a real HTTP server with a time limit, and both answer inside an episode an env manager plays."""

import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from roll.agentic.env_managers import ChatTokens, TrajEnvManager
from roll.agentic.envs import make_env
from roll.agentic.envs.tools import PythonCodeTool, SearchTool, ToolEnv
from roll.agentic.envs.tools.wrapper import MAX_USES_NOTE
from roll.configs import ConfigError, compose_config
from roll.configs.agentic import EnvConfig, ToolConfig, ToolWrapperArgs, ToolWrapperConfig
from roll.demo.tiny_model import build_tokenizer
from roll.pipeline.agentic.config import load_agentic_config
from tests.configs.test_roll_compat import CORPUS

WHERE = "custom_envs.T.tool_wrapper.tool_configs[0]"


def wrapper(*tools, **args) -> ToolWrapperConfig:
    return ToolWrapperConfig(ToolWrapperArgs(**args), [ToolConfig(tool_id, tool_args) for tool_id, tool_args in tools])


def play(manager, replies: list[str], seed: int = 7) -> None:
    """The test-double policy: scripted replies, token ids as a sampling engine returns them."""
    manager.start(seed, "g0", "t0")
    for reply in replies:
        if manager.request() is None:
            break
        ids = manager.chat.encode(reply) + [manager.chat.eos_token_id]
        manager.apply(ids, [-0.1] * len(ids))


@pytest.fixture(scope="module")
def chat():
    corpus = ["What is", "Code execution result:", "<code>print()</code>", "<answer></answer>", "0123456789+-*"]
    return ChatTokens(build_tokenizer(corpus))


def test_python_tool_runs_in_the_sandbox_inside_an_episode(chat):
    """A calculator episode wrapped with ROLL's python_code tool: the first reply's <code> runs in the sandbox
    (its own PID namespace, where the program is PID 1: no bubblewrap process inside), the output is the next
    observation the model reads, and the next reply (no call) goes to the environment, which grades it."""
    config = EnvConfig(
        env_type="calculator",
        max_turns=3,
        max_tokens_per_step=64,
        tool_wrapper=wrapper(("python_code", {"timeout": 5}), tool_reward=0.1, tool_success_reward=0.2),
    )
    manager = TrajEnvManager(0, "Calc", config, chat, 0.0, prompt_length=512, response_length=1024)
    reference = make_env("calculator", {})
    reference.reset(seed=7)  # the question the episode gets
    answer = reference.answer
    expression = reference.expression
    play(manager, [f"<code>import os\nprint({expression}, os.getpid())</code>", f"<answer>{answer}</answer>"])
    first, second = manager.episode.turns
    assert first.reward == pytest.approx(0.3)  # tool_reward + tool_success_reward
    assert second.observation == f"Code execution result: {answer} 1\n\n"  # stdout as printed, then ROLL's "\n"
    assert second.reward == 1.0 and manager.episode.success and manager.episode.end_reason == "done"
    assert manager.episode.score == pytest.approx(1.3)
    (row,) = manager.samples()
    assert chat.observation_ids(manager.turn_text(second.observation))[0] in row["response_ids"]
    assert "Code execution result" in chat.decode(row["response_ids"])
    # the first prompt carries the tool's instructions after the question (ROLL's wrapper)
    assert "<code>" in chat.decode(row["prompt_ids"]) and expression in chat.decode(row["prompt_ids"])


def test_hostile_program_is_contained(tmp_path):
    env = ToolEnv(make_env("calculator", {}), [PythonCodeTool(WHERE, timeout=1, memory_mb=128)], max_tool_uses=None)
    env.reset(seed=0)
    target = tmp_path / f"escape-{uuid.uuid4().hex}"
    wrote = env.step(f"<code>open({str(target)!r}, 'w').write('x')\nprint('wrote')</code>")
    assert not target.exists()  # the host's file system is not writable from the sandbox
    assert "wrote" not in wrote.observation.splitlines() and "Error" in wrote.observation
    assert not wrote.info["tool_ok"] and wrote.reward == 0.05  # tool_reward only: a failed call
    start = time.monotonic()
    spin = env.step("<code>while True: pass</code>")
    assert (
        spin.observation == "Code execution result: Timed out: the program ran longer than 1 s (tool_args.timeout).\n"
    )
    bomb = env.step("<code>import os\nwhile True: os.fork()</code>")  # the sandbox's process cap, then its kill
    assert not bomb.info["tool_ok"] and time.monotonic() - start < 20
    hog = env.step("<code>x = bytearray(512 * 2**20)\nprint(len(x))</code>")
    assert not hog.info["tool_ok"] and hog.observation.endswith("MemoryError\n")  # the 128 MiB cap
    assert env.step("<code>print('still here')</code>").observation == "Code execution result: still here\n\n"


def test_wrapper_counts_uses_and_passes_other_replies_to_the_env():
    tool = PythonCodeTool(WHERE, keep_error_last_line=True)
    env = ToolEnv(make_env("calculator", {"max_steps": 9}), [tool], tool_reward=0.5, tool_success_reward=1.0,
                  max_tool_uses=2)  # fmt: skip
    first = env.reset(seed=3)
    assert first.endswith("\n" + tool.instructions()) and first.startswith("What is")
    error = env.step("first ```python\n1/0\n``` then <code>print(1)</code>")  # the call that ends first runs
    assert error.observation == "Code execution result: ZeroDivisionError: division by zero\n"
    assert error.reward == 0.5 and error.info["tool_use_counter"] == 1 and error.info["tool_success_counter"] == 0
    last = env.step("<code>print(6*7)</code>")
    assert last.observation == "Code execution result: 42\n\n" + MAX_USES_NOTE and last.reward == 1.5
    spent = env.step("<code>print(1)</code>")  # no uses left: the env gets the reply (an invalid action)
    assert spent.info["tool_used"] is False and not spent.info["action_is_valid"]
    silent = ToolEnv(make_env("calculator", {}), [tool]).step("<code>x = 1</code>")
    assert not silent.info["tool_ok"] and silent.reward == 0.05  # ROLL: no output is a failed call


# ---- search -----------------------------------------------------------------------------------------------


class Retriever(BaseHTTPRequestHandler):
    """A Search-R1 retriever; msgpack_only: like GEM's mosec server, JSON bodies get HTTP 422."""

    delay = 0.0
    msgpack_only = False
    requests: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        import msgpack

        raw = self.rfile.read(int(self.headers["Content-Length"]))
        packed = self.headers["Content-Type"] == "application/msgpack"
        if self.msgpack_only and not packed:
            self.send_response(422)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = msgpack.unpackb(raw) if packed else json.loads(raw)
        Retriever.requests.append(body)
        time.sleep(self.delay)
        docs = [{"document": {"contents": f'"Doc {i}"\ntext about {body["queries"][0]}'}} for i in range(2)]
        if body["queries"] == ["broken"]:
            reply = b"not json"
        else:
            reply = msgpack.packb({"result": [docs]}) if packed else json.dumps({"result": [docs]}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/msgpack" if packed else "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the tool gave up first (the time-limit test)

    def log_message(self, *args):
        pass


@pytest.fixture
def retriever():
    Retriever.delay, Retriever.requests, Retriever.msgpack_only = 0.0, [], False
    server = ThreadingHTTPServer(("127.0.0.1", 0), Retriever)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/retrieve"
    server.shutdown()
    server.server_close()


def test_search_tool_asks_the_server_and_returns_passages(retriever):
    tool = SearchTool(WHERE, env_name="custom_envs.HotpotQA", search_url=retriever, topk=2)
    assert tool.call("no call here") is None
    call = tool.call("<think>need it</think><search> capital of France </search> trailing")
    assert Retriever.requests == [{"queries": ["capital of France"], "topk": 2, "return_scores": True}]
    assert call.ok and call.parsed_action.endswith("</search>")
    assert call.observation == (
        '\n\n<information>Doc 1(Title: "Doc 0") text about capital of France\n'
        'Doc 2(Title: "Doc 1") text about capital of France\n</information>\n\n'
    )


def test_search_tool_speaks_msgpack_to_a_server_that_refuses_json(retriever):
    Retriever.msgpack_only = True  # GEM's mosec retrieval server, which ROLL's start_retrieval_server.sh starts
    call = SearchTool(WHERE, env_name="custom_envs.HotpotQA", search_url=retriever, topk=2).call("<search>x</search>")
    assert call.ok and 'Doc 2(Title: "Doc 1") text about x' in call.observation
    assert Retriever.requests == [{"queries": ["x"], "topk": 2, "return_scores": True}]


def test_search_failures_name_the_env_and_url_and_keep_the_time_limit(retriever, monkeypatch):
    from roll.agentic.envs.tools import search

    warnings = []
    monkeypatch.setattr(search.logger, "warning", warnings.append)
    tool = SearchTool(WHERE, env_name="custom_envs.HotpotQA", search_url=retriever, timeout=0.3)
    Retriever.delay = 2.0
    start = time.monotonic()
    slow = tool.call("<search>q</search>")
    assert time.monotonic() - start < 1.5
    assert not slow.ok and f"custom_envs.HotpotQA: search request to {retriever} failed: no answer within 0.3 s" in (
        slow.observation
    )
    Retriever.delay = 0.0
    broken = tool.call("<search>broken</search>")
    assert not broken.ok and retriever in broken.observation and "not json" in broken.observation
    closed = SearchTool(WHERE, env_name="custom_envs.HotpotQA", search_url="http://127.0.0.1:9/retrieve")
    down = closed.call("<search>q</search>")
    assert not down.ok and "custom_envs.HotpotQA: search request to http://127.0.0.1:9/retrieve failed" in (
        down.observation
    )
    assert len(warnings) == 3 and warnings[-1] in down.observation  # each failure is also logged


# ---- config -----------------------------------------------------------------------------------------------


def load(*overrides):
    return load_agentic_config(compose_config(str(CORPUS), "agentic_roll_frozen_lake", list(overrides)))


PYTHON_TOOL = "+custom_envs.FrozenLake.tool_wrapper={wrapper_args:{tool_reward:0,tool_success_reward:0.1,max_tool_uses:1},tool_configs:[{tool_id:python_code,tool_args:{timeout:5,sandbox_type:none,keep_error_last_line:false}}]}"  # noqa: E501


def test_rolls_tool_wrapper_loads_with_rolls_meaning():
    env = load(PYTHON_TOOL).custom_envs["FrozenLake"]
    assert env.tool_wrapper.wrapper_args == ToolWrapperArgs(0.0, 0.1, 1)
    assert env.tool_wrapper.tool_configs[0].tool_id == "python_code"
    search = "+custom_envs.FrozenLake.tool_wrapper={tool_configs:[{tool_id:search,tool_args:{search_url:'http://localhost:8000/retrieve'}}]}"  # noqa: E501
    assert load(search).custom_envs["FrozenLake"].tool_wrapper.wrapper_args == ToolWrapperArgs()  # GEM's defaults
    # ROLL builds the tools of the tags it runs only: its examples' unused HotpotQA_with_mcp (server_url: xxx) loads
    unused = "+custom_envs.Unused={env_type:frozen_lake,tool_wrapper:{tool_configs:[{tool_id:mcp,tool_args:{server_url:xxx}}]}}"  # noqa: E501
    assert load(unused).custom_envs["Unused"].tool_wrapper.tool_configs[0].tool_args == {"server_url": "xxx"}


@pytest.mark.parametrize(
    "tool,message",
    [
        (
            "{tool_id:mcp,tool_args:{server_url:xxx}}",
            "tool_args.server_url = 'xxx': expected the http(s) URL of an MCP",
        ),
        ("{tool_id:search,tool_args:{search_url:'localhost:8000'}}", "search_url = 'localhost:8000': expected an"),
        ("{tool_id:python_code,tool_args:{timout:5}}", "tool_configs[0].tool_args: unknown key(s) ['timout']"),
        ("{tool_id:python_code,tool_args:{sandbox_type:docker}}", "sandbox_type = 'docker': choose one of"),
        ("{tool_id:shell}", "tool_id' = 'shell' is not allowed"),
    ],
)
def test_bad_tool_configs_are_refused_at_load(tool, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(f"+custom_envs.FrozenLake.tool_wrapper={{tool_configs:[{tool}]}}")
