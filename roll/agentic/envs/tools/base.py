"""The tool interface of ROLL's tool wrapper (custom_envs.<tag>.tool_wrapper): a tool recognises its call in the
model's reply, runs it, and returns the text the model reads next.

Two more forms of the same tool serve the other env managers: `functions` / `invoke` (the agent_native manager:
the tool declared as JSON-schema functions the chat template renders, called with parsed arguments) and
`locate` (the tir manager: where the first call in a text ends, without running it)."""

import abc
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass
class ToolCall:
    observation: str  # what the model reads next (the tool's output or the reason it failed)
    ok: bool  # the tool ran and gave a result (ROLL: no execution error)
    parsed_action: str  # the reply up to the end of the call (ROLL logs it)


class Tool(abc.ABC):
    """One tool of an environment. `tool_args` of the YAML are the constructor's keyword arguments; each tool
    lists them (with defaults) in `default_args` and refuses others, naming `where`."""

    tool_id: ClassVar[str]
    default_args: ClassVar[dict[str, Any]] = {}
    contacts_at_reset: ClassVar[bool] = False  # its instructions come from a server (the driver does not ask)

    def __init__(self, where: str, **tool_args):
        self.where = where  # custom_envs.<tag>.tool_wrapper.tool_configs[i], for every message
        unknown = sorted(set(tool_args) - set(self.default_args))
        if unknown:
            raise ValueError(
                f"{where}.tool_args: unknown key(s) {unknown} for tool_id {self.tool_id!r}; "
                f"valid keys: {sorted(self.default_args)}"
            )
        self.args = {**self.default_args, **tool_args}

    @abc.abstractmethod
    def instructions(self) -> str:
        """How to call the tool; appended to the episode's first observation (ROLL's instruction_string)."""

    @abc.abstractmethod
    def call(self, action: str) -> ToolCall | None:
        """Run the call in `action`, or None when the reply holds no call for this tool."""

    def locate(self, text: str) -> int | None:
        """The end offset of the call `call(text)` would run, or None; runs nothing."""
        raise NotImplementedError(f"tool {self.tool_id!r} cannot be located in a reply")

    def functions(self) -> list[dict]:
        """The function schemas this tool offers to native tool calling (roll.agentic.tool_calls.function_schema)."""
        raise NotImplementedError(f"tool {self.tool_id!r} has no function form")

    def invoke(self, name: str, arguments: dict) -> ToolCall:
        """Run one of `functions()` with arguments checked against its schema (roll.agentic.envs.tools.functions
        .check_arguments); ValueError when a check of the tool's own rejects them (a malformed call)."""
        raise NotImplementedError(f"tool {self.tool_id!r} has no function form")

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    # ---- checks shared by the tools -----------------------------------------------------------------
    def positive_number(self, key: str) -> float:
        value = self.args[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{self.where}.tool_args.{key} must be a positive number, got {value!r}")
        return float(value)

    def positive_int(self, key: str, minimum: int = 1) -> int:
        value = self.args[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{self.where}.tool_args.{key} must be an integer >= {minimum}, got {value!r}")
        return value

    def optional_str(self, key: str) -> str | None:
        value = self.args[key]
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{self.where}.tool_args.{key} must be a string or null, got {value!r}")
        return value
