"""A tool-using arithmetic task: the model may run Python in the sandbox before answering."""

import ast
import operator
import random
import re

from roll.agentic.envs.base import BaseEnv, EnvStep, EpisodeCounter, check_positive_int
from roll.agentic.envs.registry import register_env
from roll.sandbox import require_isolation, run_python

TOOL_RE = re.compile(r"^\s*<python>(.*?)</python>\s*$", re.DOTALL | re.IGNORECASE)
ANSWER_RE = re.compile(r"^\s*<answer>\s*(-?\d+)\s*</answer>\s*$", re.IGNORECASE)
OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
AST_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def evaluate(expression: str) -> int:
    """Integer value of a +, -, * expression of whole numbers (unary minus too) with Python precedence (no eval)."""

    def walk(node):
        if isinstance(node, ast.BinOp) and type(node.op) in AST_OPS:
            return AST_OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return -walk(node.operand) if isinstance(node.op, ast.USub) else walk(node.operand)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        raise ValueError(f"unexpected node {ast.dump(node)}")

    return walk(ast.parse(expression, mode="eval").body)


@register_env("calculator")
class CalculatorEnv(BaseEnv):
    instructions = (
        "Answer the arithmetic question. You may run Python first: reply <python>print(...)</python> and the "
        "next message is what it printed. When you know the result reply <answer>N</answer> with the integer N."
    )
    action_pattern = rf"{TOOL_RE.pattern}|{ANSWER_RE.pattern}"
    default_config = {
        "max_operand": 50,
        "num_operations": 2,
        "max_steps": 4,
        "tool_timeout": 5.0,
        "tool_memory_mb": 256,
        "max_tool_output_chars": 500,
        # true runs the tool in a plain child process where the kernel sandbox is unavailable: NOT isolated
        "allow_unsafe_local_sandbox": False,
    }

    def __init__(self, **env_config):
        super().__init__(**env_config)
        self.max_operand = check_positive_int(self, "max_operand")
        self.num_operations = check_positive_int(self, "num_operations")
        self.max_steps = check_positive_int(self, "max_steps")
        self.tool_memory_mb = check_positive_int(self, "tool_memory_mb", minimum=64)
        self.max_output = check_positive_int(self, "max_tool_output_chars")
        self.tool_timeout = self.config["tool_timeout"]
        if (
            isinstance(self.tool_timeout, bool)
            or not isinstance(self.tool_timeout, (int, float))
            or self.tool_timeout <= 0
        ):
            raise ValueError(
                f"calculator: env_config 'tool_timeout' must be a positive number of seconds, got {self.tool_timeout!r}"
            )
        self.allow_unsafe = bool(self.config["allow_unsafe_local_sandbox"])
        require_isolation(self.allow_unsafe)  # refuse at start-up, not at the first tool call
        self.counter = EpisodeCounter(self.max_steps)

    def reset(self, seed: int) -> str:
        rng = random.Random(seed)
        terms = [str(rng.randint(1, self.max_operand))]
        for _ in range(self.num_operations):
            terms += [rng.choice(list(OPS)), str(rng.randint(1, self.max_operand))]
        self.expression = " ".join(terms)
        self.answer = evaluate(self.expression)
        self.counter.reset()
        return self.question()

    def question(self) -> str:
        return f"What is {self.expression}?"

    def run_tool(self, code: str) -> str:
        result = run_python(
            code, timeout=self.tool_timeout, memory_mb=self.tool_memory_mb, allow_unsafe=self.allow_unsafe
        )
        if result.timed_out:
            text = "timeout"
        elif result.returncode != 0:
            lines = result.stderr.strip().splitlines()
            text = lines[-1] if lines else f"error (exit code {result.returncode})"
        else:
            text = result.stdout.strip() or "(no output)"
        return text if len(text) <= self.max_output else text[: self.max_output] + " [truncated]"

    def step(self, action: str) -> EnvStep:
        self.counter.tick("calculator")
        tool, answer = TOOL_RE.match(action), ANSWER_RE.match(action)
        if answer is not None:
            success = int(answer.group(1)) == self.answer
            self.counter.finish(True)
            observation = "Correct." if success else "Wrong."
            return EnvStep(
                observation,
                1.0 if success else 0.0,
                True,
                {"action_is_valid": True, "success": success, "tool_call": False, "steps": self.counter.steps},
            )
        if tool is not None:
            observation = self.run_tool(tool.group(1))
        else:
            observation = "Invalid action: reply <python>code</python> or <answer>N</answer>.\n" + self.question()
        done = self.counter.finish(False)
        return EnvStep(
            observation,
            0.0,
            done,
            {
                "action_is_valid": tool is not None,
                "success": False,
                "tool_call": tool is not None,
                "steps": self.counter.steps,
            },
        )
