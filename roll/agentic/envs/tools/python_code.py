"""ROLL's python_code tool: the model writes a program in <code>...</code> (or a ```python block); it runs in
roll's kernel sandbox (roll.sandbox: namespaces, read-only file system, seccomp, a memory and process cap, a
time limit), never in the environment worker's process, and what it printed is the next observation."""

import re

from roll.agentic.envs.tools.base import Tool, ToolCall
from roll.agentic.envs.tools.functions import function_schema
from roll.sandbox import require_isolation, run_python

# ROLL's default call syntax (its PythonCodeTool.patterns)
DEFAULT_PATTERNS = [r"<code>(.*?)</code>", r"```\n?python(.*?)```"]
# ROLL's sandbox_type values (GEM's runner): both run in roll's sandbox here, which is always on
SANDBOX_TYPES = ("none", "bwrap")
INSTRUCTIONS = (
    "You can run Python to help with calculations. Put a complete program (imports included) between "
    "<code> and </code>, or in a ```python code block, and print what you need: the printed output comes back "
    "after 'Code execution result:'. Keep reasoning step by step, then give the final answer."
)

FUNCTION = function_schema(
    "python",
    "Run a Python program in a sandbox (standard library only, no network) and return what it printed.",
    {"code": {"type": "string", "description": "a complete program; print the values you need"}},
    ["code"],
)


class PythonCodeTool(Tool):
    tool_id = "python_code"
    default_args = {
        # ROLL's keys
        "timeout": 5,  # seconds per program
        "sandbox_type": "none",
        "keep_error_last_line": False,  # only the last line of stderr goes back to the model
        "tool_instruction": None,  # null = INSTRUCTIONS
        "patterns": None,  # regexes whose group 1 is the code; null = DEFAULT_PATTERNS
        # roll's sandbox limits
        "memory_mb": 256,
        # true runs the code in a plain child process where the kernel sandbox is unavailable: NOT isolated
        "allow_unsafe_local_sandbox": False,
    }

    def __init__(self, where: str, **tool_args):
        super().__init__(where, **tool_args)
        self.timeout = self.positive_number("timeout")
        self.memory_mb = self.positive_int("memory_mb", minimum=64)
        if self.args["sandbox_type"] not in SANDBOX_TYPES:
            raise ValueError(
                f"{where}.tool_args.sandbox_type = {self.args['sandbox_type']!r}: choose one of {list(SANDBOX_TYPES)} "
                "(either way the code runs in roll's kernel sandbox)"
            )
        for key in ("keep_error_last_line", "allow_unsafe_local_sandbox"):
            if not isinstance(self.args[key], bool):
                raise ValueError(f"{where}.tool_args.{key} must be true or false, got {self.args[key]!r}")
        self.instruction = self.optional_str("tool_instruction") or INSTRUCTIONS
        patterns = self.args["patterns"] if self.args["patterns"] is not None else DEFAULT_PATTERNS
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise ValueError(f"{where}.tool_args.patterns must be a non-empty list of regexes, got {patterns!r}")
        try:
            self.patterns = [re.compile(p, re.DOTALL) for p in patterns]
        except re.error as error:
            raise ValueError(f"{where}.tool_args.patterns: {error}") from None
        if any(p.groups < 1 for p in self.patterns):
            raise ValueError(f"{where}.tool_args.patterns: every regex needs a group that captures the code")
        self.allow_unsafe = self.args["allow_unsafe_local_sandbox"]
        require_isolation(self.allow_unsafe)  # refuse at start-up (and in --dry_run), not at the first call

    def instructions(self) -> str:
        return self.instruction

    def parse(self, action: str) -> tuple[str, str] | None:
        """(code, reply up to the call's end) of the call that ends first, as ROLL: each pattern's first match."""
        found = [m for m in (p.search(action) for p in self.patterns) if m is not None]
        if not found:
            return None
        first = min(found, key=lambda m: m.end())
        return first.group(1).strip(), action[: first.end()]

    def locate(self, text: str) -> int | None:
        parsed = self.parse(text)
        return None if parsed is None else len(parsed[1])

    def call(self, action: str) -> ToolCall | None:
        parsed = self.parse(action)
        if parsed is None:
            return None
        code, parsed_action = parsed
        observation, ok = self.run(code)
        return ToolCall(observation, ok, parsed_action)

    def run(self, code: str) -> tuple[str, bool]:
        """(what the model reads, whether the program ran well) for one program, run in the sandbox."""
        result = run_python(code, timeout=self.timeout, memory_mb=self.memory_mb, allow_unsafe=self.allow_unsafe)
        stderr = result.stderr.strip()
        if result.timed_out:
            stderr = f"Timed out: the program ran longer than {self.timeout:g} s (tool_args.timeout)."
        elif result.memory_exceeded:
            stderr = f"{stderr}\nKilled: the program exceeded the {self.memory_mb} MiB memory limit.".strip()
        ok = result.returncode == 0 and not result.timed_out
        if stderr and self.args["keep_error_last_line"]:
            stderr = stderr.splitlines()[-1]
        text = (f"{result.stdout}\n{stderr}" if stderr else result.stdout).lstrip(" \n")
        ok = ok and bool(text)  # ROLL: a program that prints nothing is a failed call
        return f"Code execution result: {text}\n", ok

    # native tool calling: one function, `python`, whose argument is the program
    def functions(self) -> list[dict]:
        return [FUNCTION]

    def invoke(self, name: str, arguments: dict) -> ToolCall:
        observation, ok = self.run(arguments["code"])
        return ToolCall(observation, ok, "")
