"""The calculator tool: arithmetic on whole numbers (+, -, *, parentheses), evaluated from its syntax tree in the
environment worker's process (no code runs, so no sandbox is needed). Text form: <calculator>expression
</calculator> (the tool wrapper, the tir manager); native form: the function `calculator` with an `expression`."""

import re

from roll.agentic.envs.calculator import evaluate
from roll.agentic.envs.tools.base import Tool, ToolCall
from roll.agentic.envs.tools.functions import function_schema

CALL_RE = re.compile(r"<calculator>(.*?)</calculator>", re.DOTALL)
INSTRUCTIONS = (
    "A calculator can do arithmetic for you: write <calculator>expression</calculator> (whole numbers, + - * and "
    "parentheses) and the value comes back."
)
FUNCTION = function_schema(
    "calculator",
    "Evaluate an arithmetic expression of whole numbers with + - * and parentheses.",
    {"expression": {"type": "string", "description": "for example (12 + 30) * 7"}},
    ["expression"],
)
MAX_CHARS = 200  # a longer expression is refused (the value of a long product grows without bound)


class CalculatorTool(Tool):
    tool_id = "calculator"
    default_args = {"tool_instruction": None}  # null = INSTRUCTIONS

    def __init__(self, where: str, **tool_args):
        super().__init__(where, **tool_args)
        self.instruction = self.optional_str("tool_instruction") or INSTRUCTIONS

    def instructions(self) -> str:
        return self.instruction

    def locate(self, text: str) -> int | None:
        match = CALL_RE.search(text)
        return None if match is None else match.end()

    def call(self, action: str) -> ToolCall | None:
        match = CALL_RE.search(action)
        if match is None:
            return None
        text, ok = self.evaluate(match.group(1))
        return ToolCall(f"\n{text}\n", ok, action[: match.end()])

    def evaluate(self, expression: str) -> tuple[str, bool]:
        """(the value, True) or (why not, False)."""
        expression = expression.strip()
        if len(expression) > MAX_CHARS:
            return f"Error: the expression is longer than {MAX_CHARS} characters.", False
        try:
            return str(evaluate(expression)), True
        except (SyntaxError, ValueError, RecursionError):
            return f"Error: {expression!r} is not an expression of whole numbers with + - * and parentheses.", False

    def functions(self) -> list[dict]:
        return [FUNCTION]

    def invoke(self, name: str, arguments: dict) -> ToolCall:
        text, ok = self.evaluate(arguments["expression"])
        return ToolCall(text, ok, "")
