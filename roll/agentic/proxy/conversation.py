"""An agent's chat requests → the token ids the engine generates from, token in and token out.

An agent sends the whole conversation with every request. When it extends the conversation the endpoint last
answered — the same messages, then the endpoint's own reply, then new messages — the prompt is the ids of the
earlier prompt, the exact reply ids the engine generated (with the end-of-turn token a cut reply gets), then the
new messages rendered by the tokenizer's chat template. Decoded replies are never re-tokenised (byte-level BPE
does not round-trip, docs/agentic.md). A request that rewrites the history instead (edits or drops a message,
changes the tools) is rendered whole and starts a new conversation segment; each segment becomes its own
trajectory row. The new messages are rendered as the text the template puts after a finished assistant turn, as
the native env managers render observations (roll.agentic.env_managers.chat).
"""

import json
from dataclasses import dataclass, field

from roll.agentic.env_managers.chat import ChatTokens, TokenTrajectory

ROLES = ("system", "user", "assistant", "tool")
PROBE = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]  # a finished turn to render after


class RequestError(Exception):
    """A request the endpoint refuses (HTTP 400, OpenAI's error code `code`). `ends_episode`: the episode's end
    reason when the refusal means no later request can be served either (its row is full)."""

    def __init__(self, message: str, code: str = "invalid_request", ends_episode: str | None = None):
        super().__init__(message)
        self.code, self.ends_episode = code, ends_episode


@dataclass
class Segment:
    """One conversation of requests that each extended the previous one: one trajectory row."""

    trajectory: TokenTrajectory
    tools: str  # the tools it was rendered with (canonical JSON; '' for none)
    seen: list[tuple] = field(default_factory=list)  # the messages up to the last reply, as _key()s
    turns: int = 0


@dataclass
class Prompt:
    """A request ready to generate from."""

    ids: list[int]  # the engine's prompt
    room: int  # reply tokens the row has room for
    segment: Segment | None  # the segment it extends (None: a new one)
    delta_ids: list[int]  # the new messages' ids after the segment's last reply
    keys: list[tuple]  # the request's messages
    text: str  # the new messages' contents (transcripts)
    tools: str


class Conversation:
    def __init__(
        self,
        chat: ChatTokens,
        prompt_length: int,
        response_length: int,
        trajectory_mode: str = "traj",
        template_kwargs: dict | None = None,
    ):
        self.chat, self.tokenizer = chat, chat.tokenizer
        self.prompt_length, self.response_length, self.mode = prompt_length, response_length, trajectory_mode
        self.template_kwargs = template_kwargs or {}
        self.segments: list[Segment] = []

    def prompt(self, messages, tools) -> Prompt:
        messages = normalize_messages(messages)
        if messages[-1]["role"] == "assistant":
            raise RequestError("the last message is the assistant's; continuing a reply is not served", "bad_messages")
        tools = check_tools(tools)
        tools_key = json.dumps(tools, sort_keys=True) if tools else ""
        keys = [_key(message) for message in messages]
        last = self.segments[-1] if self.segments else None
        if last is not None and last.tools == tools_key and keys[: len(last.seen)] == last.seen:
            return self._extend(last, messages, keys, tools, tools_key)  # longer than seen: it ends with no reply
        text = self._render(messages, True, tools)
        self._check_rendered(messages, text, tools)
        ids = self.chat.encode(text)
        if len(ids) > self.prompt_length:
            raise RequestError(
                f"the conversation has {len(ids)} tokens, more than prompt_length = {self.prompt_length}",
                "context_length_exceeded",
                ends_episode="length",
            )
        return Prompt(ids, self.response_length - 1, None, [], keys, _contents(messages), tools_key)

    def _extend(self, segment: Segment, messages, keys, tools, tools_key) -> Prompt:
        new = messages[len(segment.seen) :]
        prefix = self._render(PROBE, False, tools)
        full = self._render(PROBE + new, True, tools)
        if not full.startswith(prefix):
            raise RequestError("the chat template re-renders earlier turns once a message is added", "bad_template")
        delta = full[len(prefix) :]
        self._check_rendered(new, delta, None)
        delta_ids = self.chat.encode(delta)
        ids = segment.trajectory.context_ids + delta_ids
        if self.mode == "step":
            if len(ids) > self.prompt_length:
                raise RequestError(
                    f"the conversation has {len(ids)} tokens, more than prompt_length = {self.prompt_length} "
                    "(trajectory_mode step: every request is one row's prompt)",
                    "context_length_exceeded",
                    ends_episode="length",
                )
            room = self.response_length - 1
        else:  # the reply and its end-of-turn token must fit the row after the new messages
            room = self.response_length - len(segment.trajectory.response_ids) - len(delta_ids) - 1
            if room < 1:
                raise RequestError(
                    f"the episode's trajectory would exceed response_length = {self.response_length} tokens",
                    "context_length_exceeded",
                    ends_episode="length",
                )
        return Prompt(ids, room, segment, delta_ids, keys, _contents(new), tools_key)

    def record(self, prompt: Prompt, reply_ids: list[int], log_probs: list[float], reply: dict) -> None:
        """The engine's reply to `prompt`, and the message the agent got for it."""
        segment = prompt.segment
        if segment is None:
            segment = Segment(TokenTrajectory(prompt_ids=list(prompt.ids)), prompt.tools)
            self.segments.append(segment)
        else:
            segment.trajectory.add_context(prompt.delta_ids)
        segment.trajectory.add_generated(list(reply_ids), list(log_probs), self.chat.eos_token_id)
        segment.seen = prompt.keys + [_key(reply)]
        segment.turns += 1

    def _render(self, messages, generation_prompt: bool, tools) -> str:
        return self.tokenizer.apply_chat_template(
            [for_template(message) for message in messages],
            tools=tools or None,
            add_generation_prompt=generation_prompt,
            tokenize=False,
            **self.template_kwargs,
        )

    def _check_rendered(self, messages, text: str, tools) -> None:
        """The template must show every message and the tools; a silently dropped one would train on a prompt the
        agent never meant."""
        for message in messages:
            if message["content"] and message["content"] not in text:
                raise RequestError(f"the model's chat template drops {message['role']} messages", "bad_messages")
        if tools and self._render([{"role": "user", "content": "u"}], True, None) == self._render(
            [{"role": "user", "content": "u"}], True, tools
        ):
            raise RequestError("the model's chat template does not render tools", "tools_not_supported")


def normalize_messages(messages) -> list[dict]:
    """The request's messages with text content (a list of text parts is joined); anything else is a
    RequestError naming the message."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", "bad_messages")
    out = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            role = message.get("role") if isinstance(message, dict) else None
            raise RequestError(f"{where}: role {role!r} is not one of {ROLES}", "bad_messages")
        normalized = {"role": message["role"], "content": _text(message.get("content"), where)}
        calls = message.get("tool_calls") or []
        if calls:
            if message["role"] != "assistant" or not isinstance(calls, list):
                raise RequestError(f"{where}: tool_calls belong to assistant messages, as a list", "bad_messages")
            normalized["tool_calls"] = [_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)]
        for key in ("tool_call_id", "name"):
            if isinstance(message.get(key), str):
                normalized[key] = message[key]
        out.append(normalized)
    return out


def check_tools(tools) -> list | None:
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise RequestError("'tools' must be a list of tool objects", "bad_tools")
    return tools


def for_template(message: dict) -> dict:
    """A message as chat templates take it: tool-call arguments as a mapping (Qwen's templates `tojson` them)."""
    out = dict(message)
    if "tool_calls" in out:
        out["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": _arguments(call["function"]["arguments"])}}
            for call in out["tool_calls"]
        ]
    return out


def _text(content, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestError(f"{where}.content: only text parts are served, not {kind!r}", "bad_messages")
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(f"{where}.content must be a string or a list of text parts", "bad_messages")


def _call(call, where: str) -> dict:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RequestError(f"{where}: expected {{'type': 'function', 'function': {{'name', 'arguments'}}}}",
                           "bad_messages")  # fmt: skip
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {
        "id": call.get("id", ""),
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }


def _arguments(arguments: str):
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def _key(message: dict) -> tuple:
    """What must match for a request to extend the conversation (tool-call ids and JSON spacing aside)."""
    calls = tuple(
        (call["function"]["name"], json.dumps(_arguments(call["function"]["arguments"]), sort_keys=True))
        for call in message.get("tool_calls") or []
    )
    return message["role"], message["content"] or "", calls, message.get("tool_call_id")


def _contents(messages) -> str:
    return "\n".join(message["content"] for message in messages if message["content"])
