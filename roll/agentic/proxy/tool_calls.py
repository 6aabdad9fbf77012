"""Tool calls in a reply, in the format Qwen2.5/Qwen3 chat templates teach (ROLL's `qwen25` parser):
`<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, as OpenAI's `tool_calls` of the answer."""

import json
import re
import uuid

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str, list[dict], bool]:
    """(the text without its call blocks, the calls, whether a block was malformed). A malformed block (not a JSON
    object with a string `name`) leaves the whole reply as text, with no calls."""
    blocks = list(TOOL_CALL.finditer(text))
    if not blocks:
        return text, [], False
    calls = []
    for block in blocks:
        try:
            call = json.loads(block.group(1))
        except json.JSONDecodeError:
            return text, [], True
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return text, [], True
        arguments = call.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    return TOOL_CALL.sub("", text).strip(), calls, False
