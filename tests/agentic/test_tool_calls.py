"""Native tool calls against the chat template's own output: what the template renders for an assistant message
with tool calls parses back to those calls, and the tokens roll builds around a reply (first prompt, tool
results, the next user turn) are the template's own tokens for the whole conversation."""

import pytest

from roll.agentic.env_managers import ChatTokens
from roll.agentic.envs.tools.calculator import FUNCTION as CALCULATOR
from roll.agentic.envs.tools.functions import check_arguments
from roll.agentic.envs.tools.python_code import FUNCTION as PYTHON
from roll.agentic.tool_calls import (
    FunctionCall,
    assistant_message,
    parse_tool_calls,
    render_call,
    tool_message,
)
from roll.demo.tiny_model import IM_END, build_tool_tokenizer

TOOLS = [CALCULATOR, PYTHON]
CALLS = [
    [FunctionCall("calculator", {"expression": "482 + 739"})],
    [FunctionCall("python", {"code": 'print("x\\ny", {1: 2})'}), FunctionCall("calculator", {"expression": "-3*4"})],
    [FunctionCall("calculator", {"expression": "état ünïcode"})],
]


@pytest.fixture(scope="module")
def chat():
    return ChatTokens(build_tool_tokenizer(["What is 482 + 739?"], TOOLS))


def render(chat, messages, **kwargs) -> str:
    return chat.tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False, **kwargs)


def generated_part(chat, messages: list[dict], reply: dict) -> str:
    """What the model writes for `reply`: the template's rendering of it after the generation prompt, up to the
    end-of-turn token."""
    prompt = render(chat, messages, add_generation_prompt=True)
    full = render(chat, [*messages, reply])
    assert full.startswith(prompt)
    return full[len(prompt) :].split(IM_END)[0]


@pytest.mark.parametrize("calls", CALLS)
def test_the_templates_rendering_of_calls_parses_back_to_them(chat, calls):
    user = [{"role": "user", "content": "What is 482 + 739?"}]
    for content in ("", "Let me compute."):
        reply = {
            "role": "assistant",
            "content": content,
            "tool_calls": [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls],
        }
        text = generated_part(chat, user, reply)
        parsed = parse_tool_calls(text)
        assert parsed.calls == calls and parsed.errors == [] and parsed.content == content
        assert assistant_message(parsed) == reply
        if not content:  # how roll writes a call is how the template writes it
            assert text == "\n".join(render_call(c) for c in calls)
        # arguments as a JSON string (OpenAI's wire form) render the same and parse to the same object
        stringly = {**reply, "tool_calls": [
            {"type": "function", "function": {"name": c.name, "arguments": __import__("json").dumps(c.arguments)}}
            for c in calls
        ]}  # fmt: skip
        assert parse_tool_calls(generated_part(chat, user, stringly)).calls == calls


def test_roll_tokens_around_a_reply_are_the_templates_tokens(chat):
    """First prompt + generated ids + continuation ids (tool results) + generated + continuation (user turn) =
    the template's tokenisation of the whole conversation: token-in-token-out loses nothing of the template,
    Qwen's newline after <|im_end|> included."""
    system, question = "Answer with <answer>N</answer>.", "What is 482 + 739?"
    calls = CALLS[1]
    first = {"role": "assistant", "content": "", "tool_calls": assistant_message(
        parse_tool_calls("\n".join(render_call(c) for c in calls)))["tool_calls"]}  # fmt: skip
    results = [tool_message("x\ny {1: 2}", "python"), tool_message("-12", "calculator")]
    second = {"role": "assistant", "content": "<answer>1221</answer>"}
    feedback = {"role": "user", "content": "Wrong."}
    conversation = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    ids = chat.prompt_ids(question, system, tools=TOOLS)
    assert ids == chat.encode(render(chat, conversation, add_generation_prompt=True))
    for reply, after in ((first, results), (second, [feedback])):
        text = generated_part(chat, conversation, reply)
        ids += chat.encode(text) + [chat.eos_token_id]  # what the engine generates
        ids += chat.continuation_ids(after, assistant_message(parse_tool_calls(text)), tools=TOOLS)
        conversation += [reply, *after]
    assert ids == chat.encode(render(chat, conversation, add_generation_prompt=True))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<tool_call>\n{not json}\n</tool_call>", "is not JSON"),
        ('<tool_call>\n["calculator"]\n</tool_call>', "must be a JSON object"),
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', "must be a JSON object"),
        ('<tool_call>\n{"name": "calculator", "arguments": [1]}\n</tool_call>', "must be a JSON object, got list"),
        ('<tool_call>\n{"name": "calculator", "arguments": "{oops"}\n</tool_call>', "not a JSON object"),
        ('<tool_call>\n{"name": "calculator", "arguments": {"expression": "1', "has no closing </tool_call>"),
        ('{"name": "calculator"}\n</tool_call>', "without an opening"),
    ],
)
def test_malformed_calls_are_reported_in_order(text, error):
    good = render_call(FunctionCall("calculator", {"expression": "1"}))
    parsed = parse_tool_calls(f"Thinking. {good} {text}")
    assert parsed.calls == [FunctionCall("calculator", {"expression": "1"})]
    assert len(parsed.errors) == 1 and error in parsed.errors[0], parsed.errors
    assert isinstance(parsed.items[0], FunctionCall) and parsed.has_calls
    assert not parse_tool_calls("<answer>3</answer>").has_calls


def test_arguments_are_checked_against_the_schema():
    parameters = CALCULATOR["function"]["parameters"]
    assert check_arguments({"expression": "1+1"}, parameters) is None
    assert "missing argument(s) ['expression']" in check_arguments({}, parameters)
    assert "must be string, got int" in check_arguments({"expression": 3}, parameters)
    strict = {**parameters, "additionalProperties": False}
    assert "unknown argument(s) ['x']" in check_arguments({"expression": "1", "x": 1}, strict)
    enum = {"properties": {"d": {"type": "string", "enum": ["up", "down"]}}, "required": ["d"]}
    assert "must be one of" in check_arguments({"d": "left"}, enum)
    assert "must be integer" in check_arguments({"n": True}, {"properties": {"n": {"type": "integer"}}})
