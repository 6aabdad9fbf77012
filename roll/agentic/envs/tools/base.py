"""The tool interface of ROLL's tool wrapper (custom_envs.<tag>.tool_wrapper): a tool recognises its call in the
model's reply, runs it, and returns the text the model reads next."""

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
