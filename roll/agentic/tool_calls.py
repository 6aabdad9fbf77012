"""Native tool calls: the function calls a model writes in its chat template's own format, and the messages that carry
them and their results back through the template.

The format is Qwen2.5's and Qwen3's (also Hermes'; ROLL's `qwen25` tool-call parser): each call is one JSON object
between `<tool_call>` and `</tool_call>`, `{"name": <function>, "arguments": {...}}`. A reply is parsed from the
decoded text of the tokens the engine generated (the markers are added tokens that decoding keeps). What the model
says outside the call blocks is the reply's content. A block that is not such an object, or a `<tool_call>` left
open when the reply ends, is a malformed call, never silently dropped: env_manager agent_native reports it as an
error the model reads back; the proxy env manager answers the whole reply as text (as ROLL does) and counts it.

Arguments given as a JSON string (OpenAI's wire form) are decoded to an object, which is what the chat templates of
Qwen3-Coder need (ROLL's `parse_tool_call_parameter_to_dict`).
"""

import json
import re
import uuid
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
BLOCK_RE = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)


@dataclass
class FunctionCall:
    name: str
    arguments: dict


@dataclass
class ParsedReply:
    content: str  # the reply without its call blocks, stripped
    # every call block in order: a FunctionCall, or (a malformed block) the reason it cannot be called
    items: list[FunctionCall | str] = field(default_factory=list)

    @property
    def calls(self) -> list[FunctionCall]:
        return [item for item in self.items if isinstance(item, FunctionCall)]

    @property
    def errors(self) -> list[str]:
        return [item for item in self.items if isinstance(item, str)]

    @property
    def has_calls(self) -> bool:
        """The reply tried to call a tool (well-formed or not)."""
        return bool(self.items)


def parse_tool_calls(text: str) -> ParsedReply:
    """The calls of one reply (its decoded text)."""
    items, content, position = [], [], 0
    for match in BLOCK_RE.finditer(text):
        content.append(text[position : match.start()])
        position = match.end()
        call, error = _parse_block(match.group(1))
        items.append(call if error is None else error)
    rest = text[position:]
    if OPEN in rest:  # the reply ended (or was cut) inside a call
        start = rest.index(OPEN)
        content.append(rest[:start])
        items.append(f"the call starting with {_clip(rest[start:])!r} has no closing {CLOSE}")
    elif CLOSE in rest:
        content.append(rest)
        items.append(f"{CLOSE} without an opening {OPEN}")
    else:
        content.append(rest)
    return ParsedReply("".join(content).strip(), items)


def _parse_block(body: str) -> tuple[FunctionCall | None, str | None]:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as error:
        return None, f"the call {_clip(body.strip())!r} is not JSON ({error.msg} at character {error.pos})"
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None, 'a call must be a JSON object {"name": "<function>", "arguments": {...}}'
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI's wire form: the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None, f"the arguments of {data['name']!r} are a string that is not a JSON object"
    if not isinstance(arguments, dict):
        return None, f"the arguments of {data['name']!r} must be a JSON object, got {type(arguments).__name__}"
    return FunctionCall(data["name"], arguments), None


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def render_call(call: FunctionCall) -> str:
    """How the model writes `call` (the body the templates render, json.dumps spacing)."""
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{OPEN}\n{body}\n{CLOSE}"


def assistant_message(reply: ParsedReply) -> dict:
    """The reply as a chat message, its calls in OpenAI's `tool_calls` form (arguments as objects)."""
    message = {"role": "assistant", "content": reply.content}
    if reply.calls:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in reply.calls
        ]
    return message


def openai_tool_calls(reply: ParsedReply) -> list[dict]:
    """The reply's calls as an OpenAI chat-completions answer carries them: an id each, the arguments a JSON string
    (the proxy env manager's answers)."""
    return [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in reply.calls
    ]


def tool_message(content: str, name: str | None = None) -> dict:
    message = {"role": "tool", "content": content}
    if name is not None:
        message["name"] = name
    return message
