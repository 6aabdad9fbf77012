"""The proxy env manager's endpoint, answered in-process with a scripted engine (no Ray): the `openai` package's
client is served and every request recorded token in and token out; concurrent episodes; the token and the
loopback binding; refused requests; an agent that crashes or stops answering; the row limits; forks, step rows and
tools rendered by the chat template."""

import json
import threading
import time
import urllib.error
import urllib.request

import openai  # the test extra installs it (pyproject.toml)
import pytest

from roll.agentic.env_managers import ProxyEnvManager, TrajEnvManager
from roll.agentic.envs import make_env
from roll.agentic.envs.frozen_lake import FrozenLakeEnv
from roll.agentic.envs.runners import AgentRunner, EnvRunner, EpisodeResult
from roll.configs.agentic import EnvConfig
from tests.agentic.proxy_helpers import (
    ACTIONS,
    TOOLS_TEMPLATE,
    Recorder,
    ScriptedEngine,
    char_ids,
    drive,
    proxy_manager,
    tiny_chat,
    trained,
)

SEEN = Recorder()


@pytest.fixture(scope="module")
def chat():
    return tiny_chat()


def client(runner: AgentRunner):
    return openai.OpenAI(base_url=runner.base_url, api_key=runner.api_key, max_retries=0)


class OpenAIWalker(AgentRunner):
    """A user's agent: plays FrozenLake with the `openai` client, reporting the environment's reward."""

    def run_job(self, seed):
        agent, env = client(self), make_env("frozen_lake", {})
        messages = [{"role": "user", "content": f"{env.instructions}\n{env.reset(seed=seed)}"}]
        for _ in range(self.env_config.max_turns):
            answer = agent.chat.completions.create(model="policy", messages=messages, logprobs=True)
            SEEN.add(self.env_id, answer)
            text = answer.choices[0].message.content
            messages.append({"role": "assistant", "content": text})
            step = env.step(text)
            if step.done:
                return EpisodeResult(float(step.reward), bool(step.info["success"]))
            messages.append({"role": "user", "content": step.observation})
        return EpisodeResult(0.0, False)


def test_the_openai_client_is_answered_and_every_request_recorded_token_in_token_out(chat):
    replies = [char_ids(chat, "Right"), char_ids(chat, "Dow", end=False), chat.encode("Down") + [chat.eos_token_id]]
    assert chat.encode(chat.decode(replies[0])) + [chat.eos_token_id] != replies[0]  # re-tokenising would differ
    manager = proxy_manager(chat, OpenAIWalker, env_id=10, max_turns=6, max_tokens_per_step=6)
    engine = ScriptedEngine(lambda env_id, turn: replies[turn % 3])
    drive({10: manager}, engine)
    answers, calls = SEEN.seen.pop(10), engine.calls
    assert len(answers) == len(calls) == manager.episode.stats()["num_turns"] >= 2
    for answer, (_, prompt, _, reply) in zip(answers, calls):
        choice = answer.choices[0]
        assert choice.message.content == chat.decode(reply)
        assert choice.finish_reason == ("stop" if reply[-1] == chat.eos_token_id else "length")
        assert [t.logprob for t in choice.logprobs.content] == [-0.25] * len(reply)
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(prompt), len(reply))
    (row,) = manager.samples()
    assert row["prompt_ids"] == calls[0][1]
    assert trained(row) == [t for call in calls for t in call[3]]  # exactly what the engine generated
    context = row["prompt_ids"] + row["response_ids"]
    for _, prompt, _, _ in calls:  # each request was generated from a prefix of the trained sequence
        assert context[: len(prompt)] == prompt
    mask = row["response_mask"]
    ends = [i for i in range(1, len(mask)) if mask[i - 1] == 1 and mask[i] == 0]  # after each trained reply
    assert row["response_ids"][ends[1]] == chat.eos_token_id  # the cut reply's end-of-turn: context, not trained
    assert row["rollout_log_probs"] == [-0.25 if m else 0.0 for m in row["response_mask"]]
    assert row["score"] == manager.episode.score and manager.episode.end_reason == "done"


@pytest.mark.parametrize("response_length", [256, 40])
def test_env_runner_through_the_endpoint_trains_exactly_as_the_trajectory_manager(chat, response_length):
    """ROLL's GEMRunner counterpart renders, parses and scores an episode as env_manager: traj does: the same
    replies give the same row, token for token (response_length 40 ends the episode on the row's length)."""
    template = "Turn {turn_idx} ({actions_left} left):\n{observation}"
    keys = dict(max_turns=4, max_tokens_per_step=8, agent_template=template)
    script = [char_ids(chat, "Jump"), char_ids(chat, "Right"), chat.encode("Down") + [chat.eos_token_id]] * 2
    traj = TrajEnvManager(0, "FL", EnvConfig(env_type="frozen_lake", **keys), chat, -0.1, 128, response_length)
    proxy = ProxyEnvManager(
        0,
        "FL",
        EnvConfig(
            env_type="frozen_lake", env_manager="proxy", agent_runner_cls="roll.agentic.envs.runners.EnvRunner", **keys
        ),  # fmt: skip
        chat,
        -0.1,
        128,
        response_length,
        env_cls=(EnvRunner, FrozenLakeEnv),
    )
    rows = {}
    for name, manager in (("traj", traj), ("proxy", proxy)):
        drive({0: manager}, ScriptedEngine(lambda env_id, turn: script[turn]), seed=5)
        (rows[name],) = manager.samples()
    for key in ("prompt_ids", "response_ids", "response_mask", "rollout_log_probs", "score", "success", "num_turns",
                "invalid_actions", "truncated"):  # fmt: skip
        assert rows["proxy"][key] == rows["traj"][key], key
    assert rows["traj"]["invalid_actions"] == 1 and rows["traj"]["score"] < 0  # the format penalty, counted alike
    assert rows["traj"]["truncated"] == (response_length == 40)


class ConcurrentAgent(AgentRunner):
    """Several episodes' agents send their requests at the same moment."""

    barrier = threading.Barrier(4, timeout=10)

    def run_job(self, seed):
        agent = client(self)
        messages = [{"role": "user", "content": f"episode {self.env_id}"}]
        self.barrier.wait()
        for _ in range(2):
            text = agent.chat.completions.create(model="policy", messages=messages).choices[0].message.content
            SEEN.add(self.env_id, text)
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "again"}]
        return EpisodeResult(1.0, True)


def test_concurrent_requests_of_several_episodes_each_get_their_own_reply(chat):
    managers = {i: proxy_manager(chat, ConcurrentAgent, env_id=20 + i) for i in range(4)}
    managers = {20 + i: m for i, m in managers.items()}
    engine = ScriptedEngine(lambda env_id, turn: char_ids(chat, ACTIONS[env_id - 20]))
    drive(managers, engine)
    assert len({m.server.port for m in managers.values()}) == 1  # one endpoint per process, shared
    # the first turn's four requests were all open at once: the engine answered them after all had arrived
    assert sorted(call[0] for call in engine.calls[:4]) == [20, 21, 22, 23]
    for env_id, manager in managers.items():
        assert SEEN.seen.pop(env_id) == [ACTIONS[env_id - 20]] * 2
        (row,) = manager.samples()
        assert trained(row) == char_ids(chat, ACTIONS[env_id - 20]) * 2
        assert manager.episode.success and manager.episode.end_reason == "done"


class TokenKeeper(AgentRunner):
    """Holds its episode open until told to finish, and reports its token."""

    release = threading.Event()

    def run_job(self, seed):
        SEEN.add(self.env_id, (self.base_url, self.api_key))
        self.release.wait(10)
        return EpisodeResult(0.5, True)


def _status(url: str, token: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=b'{"messages": []}', headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_token_is_required_and_the_endpoint_listens_on_loopback_only(chat):
    manager = proxy_manager(chat, TokenKeeper, env_id=30)
    manager.start(1, "g", "t")
    while 30 not in SEEN.seen:
        time.sleep(0.01)
    ((base_url, token),) = SEEN.seen.pop(30)
    url = f"{base_url}/chat/completions"
    assert manager.server.host == "127.0.0.1" and base_url.startswith("http://127.0.0.1:")
    listening = [line.split() for line in open("/proc/net/tcp").read().splitlines()[1:]]
    port = f"{manager.server.port:04X}"
    assert [s[1] for s in listening if s[1].endswith(f":{port}") and s[3] == "0A"] == [f"0100007F:{port}"]
    assert _status(url, None)[0] == 401
    status, body = _status(url, "not-the-token")
    assert status == 401 and body["error"]["code"] == "invalid_token"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base_url, api_key="not-the-token", max_retries=0).models.list()
    assert [m.id for m in openai.OpenAI(base_url=base_url, api_key=token, max_retries=0).models.list()]
    status, body = _status(url, token)  # the right token: the request itself is judged (no messages)
    assert status == 400 and "'messages' must be a non-empty list" in body["error"]["message"]
    TokenKeeper.release.set()
    assert manager.request() is None and manager.episode.end_reason == "done"
    status, body = _status(url, token)  # the episode is over: its token reaches nothing
    assert status == 410 and body["error"]["message"] == "this episode is over (done)"
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=10) as health:
        assert json.loads(health.read()) == {"status": "ok"}


class CarelessAgent(AgentRunner):
    """Sends what the endpoint cannot serve, then a good request."""

    def run_job(self, seed):
        agent, messages = client(self), [{"role": "user", "content": "Left or Right?"}]
        for extra in ({"stream": True}, {"n": 2}, {"stop": ["x"]}, {"response_format": {"type": "json_object"}}):
            try:
                agent.chat.completions.create(model="policy", messages=messages, **extra)
            except openai.BadRequestError as error:
                SEEN.add(self.env_id, error.message)
        try:
            agent.chat.completions.create(model="policy", messages=[{"role": "system", "content": "Be brief."},
                                                                   *messages])  # fmt: skip
        except openai.BadRequestError as error:
            SEEN.add(self.env_id, error.message)
        text = agent.chat.completions.create(model="policy", messages=messages).choices[0].message.content
        return EpisodeResult(float(text == "Left"))


def test_requests_the_endpoint_cannot_serve_are_refused_with_the_reason_and_the_episode_goes_on(chat):
    manager = proxy_manager(chat, CarelessAgent, env_id=40)
    drive({40: manager}, ScriptedEngine({40: [char_ids(chat, "Left")]}))
    errors = SEEN.seen.pop(40)
    for expected in ("streaming is not served", "only n=1", "stop sequences are not served",
                     "response_format is not served", "chat template drops system messages"):  # fmt: skip
        assert any(expected in error for error in errors), (expected, errors)
    stats = manager.episode.stats()
    assert (stats["bad_requests"], stats["num_turns"], stats["score"], stats["end_reason"]) == (5, 1, 1.0, "done")


class Crasher(AgentRunner):
    def run_job(self, seed):
        client(self).chat.completions.create(model="policy", messages=[{"role": "user", "content": "Go"}])
        raise ValueError("the agent broke")


class Sleeper(AgentRunner):
    """Stops answering after one reply; when woken (after its timeout), tries once more."""

    wake = threading.Event()

    def run_job(self, seed):
        agent = client(self)
        agent.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Go"}])
        self.wake.wait(10)
        try:
            agent.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Go"}])
        except openai.APIStatusError as error:
            SEEN.add(self.env_id, (error.status_code, error.message))
        return EpisodeResult(1.0)


def test_a_crashing_or_silent_agent_ends_its_episode_with_the_reason_never_the_rollout(chat):
    managers = {
        50: proxy_manager(chat, Crasher, env_id=50),
        51: proxy_manager(chat, Sleeper, env_id=51, env_config={"agent_timeout": 0.5}),
        52: proxy_manager(chat, OpenAIWalker, env_id=52),
    }
    drive(managers, ScriptedEngine(lambda env_id, turn: char_ids(chat, "Down")))
    crashed, silent, healthy = (managers[i].episode.stats() for i in (50, 51, 52))
    assert crashed["end_reason"] == "agent_error" and crashed["agent_exit_reason"] == "ValueError: the agent broke"
    assert crashed["agent_error"] == 1.0 and crashed["score"] == 0.0 and crashed["num_turns"] == 1
    assert trained(managers[50].samples()[0]) == char_ids(chat, "Down")  # what it was served still trains
    assert silent["end_reason"] == "timeout" and "agent_timeout = 0.5 s" in silent["agent_exit_reason"]
    assert silent["timeout"] == 1.0 and silent["score"] == 0.0
    assert healthy["end_reason"] == "done"
    SEEN.seen.pop(52, None)
    Sleeper.wake.set()  # its late request reaches no episode
    deadline = time.monotonic() + 10
    while 51 not in SEEN.seen and time.monotonic() < deadline:
        time.sleep(0.01)
    ((status, message),) = SEEN.seen.pop(51)
    assert status == 410 and message.endswith("this episode is over (timeout)")


class Talker(AgentRunner):
    """Keeps asking until refused; reports the refusal and a score of its own."""

    def run_job(self, seed):
        agent, messages = client(self), [{"role": "user", "content": "Walk " * self.config.get("words", 1)}]
        while True:
            try:
                text = agent.chat.completions.create(model="policy", messages=messages).choices[0].message.content
            except openai.BadRequestError as error:
                SEEN.add(self.env_id, error.code)
                return EpisodeResult(0.75)
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Walk"}]


class WordyTalker(Talker):
    default_config = {"words": 1}


def test_max_turns_and_the_rows_length_refuse_further_requests_and_set_the_end_reason(chat):
    managers = {
        60: proxy_manager(chat, Talker, env_id=60, max_turns=2),
        61: proxy_manager(chat, Talker, env_id=61, response_length=30),
        62: proxy_manager(chat, WordyTalker, env_id=62, prompt_length=12, env_config={"words": 12}),
    }
    drive(managers, ScriptedEngine(lambda env_id, turn: char_ids(chat, "Up")))
    assert SEEN.seen.pop(60) == ["max_turns"] and SEEN.seen.pop(61) == SEEN.seen.pop(62) == ["context_length_exceeded"]
    by_turns, by_length, too_long = (managers[i].episode.stats() for i in (60, 61, 62))
    assert (by_turns["end_reason"], by_turns["num_turns"], by_turns["score"]) == ("max_turns", 2, 0.75)
    assert by_length["end_reason"] == "length" and by_length["truncated"] == 1.0
    (row,) = managers[61].samples()
    assert len(row["response_ids"]) <= 30  # the refused request would not have fitted the row
    assert too_long["end_reason"] == "length" and too_long["num_turns"] == 0
    (empty,) = managers[62].samples()  # no request served: one row that trains nothing
    assert empty["response_mask"] == [0] and empty["score"] == 0.0


class Rewriter(AgentRunner):
    """Extends its conversation once, then starts over with a rewritten history."""

    def run_job(self, seed):
        agent = client(self)

        def ask(messages):
            return agent.chat.completions.create(model="policy", messages=messages).choices[0].message.content

        first = [{"role": "user", "content": "Start"}]
        r1 = ask(first)
        ask([*first, {"role": "assistant", "content": r1}, {"role": "user", "content": "Next"}])
        ask([{"role": "user", "content": "Start over"}])
        return EpisodeResult(1.0, True)


@pytest.mark.parametrize("mode", ["traj", "traj-fork", "step"])
def test_a_rewritten_history_starts_a_new_segment_and_step_mode_gives_a_row_per_request(chat, mode):
    settings = {"trajectory_mode": "step"} if mode == "step" else {"enable_fork": mode == "traj-fork"}
    manager = proxy_manager(chat, Rewriter, env_id=70, env_config=settings)
    engine = ScriptedEngine(lambda env_id, turn: char_ids(chat, ACTIONS[turn]))
    drive({70: manager}, engine)
    calls, rows = engine.calls, manager.samples()
    segments = manager.conversation.segments
    assert [s.turns for s in segments] == [2, 1]
    assert calls[2][1] == chat.prompt_ids("Start over")  # rendered whole: the history was not an extension
    if mode == "step":
        assert [r["prompt_ids"] for r in rows] == [c[1] for c in calls]
        assert [trained(r) for r in rows] == [c[3] for c in calls]
        assert [r["score"] for r in rows] == [0.0, 0.0, 1.0] and [r["state"] for r in rows] == ["step_0", "step_1",
                                                                                              "step_2"]  # fmt: skip
    else:
        kept = segments if mode == "traj-fork" else segments[:1]  # without forks: the segment with most requests
        assert [r["prompt_ids"] for r in rows] == [s.trajectory.prompt_ids for s in kept]
        assert trained(rows[0]) == calls[0][3] + calls[1][3] and all(r["score"] == 1.0 for r in rows)


TOOLS = [{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]  # fmt: skip


class ToolUser(AgentRunner):
    """Declares a tool, runs the call it gets back, and sends the result as a tool message."""

    def run_job(self, seed):
        agent, messages = client(self), [{"role": "user", "content": "What is 2 + 3?"}]
        answer = agent.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        SEEN.add(self.env_id, answer.choices[0])
        call = answer.choices[0].message.tool_calls[0]
        arguments = json.loads(call.function.arguments)
        messages += [answer.choices[0].message, {"role": "tool", "tool_call_id": call.id,
                                                 "content": str(arguments["a"] + arguments["b"])}]  # fmt: skip
        answer = agent.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        SEEN.add(self.env_id, answer.choices[0])
        raw = agent.chat.completions.create(model="policy", messages=messages[:1], tools=TOOLS, tool_choice="none")
        SEEN.add(self.env_id, raw.choices[0])
        broken = agent.chat.completions.create(model="policy", messages=messages[:1], tools=TOOLS)
        SEEN.add(self.env_id, broken.choices[0])
        return EpisodeResult(float(answer.choices[0].message.content == "5"))


def test_tools_are_rendered_by_the_chat_template_and_tool_calls_come_back_as_openai_tool_calls():
    chat = tiny_chat(TOOLS_TEMPLATE)
    call_text = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    broken = chat.encode(call_text.replace("}}", "}")) + [chat.eos_token_id]  # not JSON: answered as text
    replies = [chat.encode(call_text) + [chat.eos_token_id], char_ids(chat, "5"), chat.encode(call_text), broken]
    manager = proxy_manager(chat, ToolUser, env_id=80, prompt_length=512, response_length=512, max_tokens_per_step=64)
    engine = ScriptedEngine({80: replies})
    drive({80: manager}, engine)
    called, answered, raw, broken = SEEN.seen.pop(80)
    assert called.finish_reason == "tool_calls" and called.message.content == ""
    (call,) = called.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"a": 2, "b": 3})
    assert answered.message.content == "5" and answered.message.tool_calls is None
    assert raw.message.content == call_text and raw.message.tool_calls is None  # tool_choice none: not parsed
    assert broken.message.tool_calls is None and broken.message.content == chat.decode(replies[3])
    assert manager.episode.stats()["malformed_tool_calls"] == 1
    first, second = engine.calls[0][1], engine.calls[1][1]
    assert '"name": "add"' in chat.decode(first)  # the tools, in the template's system block
    assert second[: len(first)] == first and "<tool_response>\n5\n</tool_response>" in chat.decode(second)
    row = manager.samples()[0]  # the call and the answer trained; the tool's result is context
    assert trained(row) == replies[0] + replies[1] and manager.episode.score == 1.0


def test_a_template_without_tools_refuses_a_request_that_declares_them(chat):
    class Declarer(AgentRunner):
        def run_job(self, seed):
            try:
                client(self).chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}],
                                                     tools=TOOLS)  # fmt: skip
            except openai.BadRequestError as error:
                return EpisodeResult(0.0, agent_exit_reason=error.message)
            return EpisodeResult(1.0)

    manager = proxy_manager(chat, Declarer, env_id=90)
    drive({90: manager}, ScriptedEngine({}))
    assert manager.episode.agent_exit_reason.endswith("the model's chat template does not render tools")
