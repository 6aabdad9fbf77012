"""Strict conversion of a composed (plain-dict) config into typed dataclasses.

Every key must name a field: an unknown key fails with its full path and the closest valid name.
Every value must have the field's type: a wrong one fails with the expected type or allowed set.
Every number must lie in its field's declared range (`field_help(..., bounds="[1, inf)")`).
Nothing is coerced silently except int → float (YAML writes `1` for a float field).
"""

import dataclasses
import difflib
import math
import re
import types
import typing
from typing import Any, Literal, Union

from roll.utils.errors import UserError


class ConfigError(UserError, ValueError):
    """A user-facing configuration error: names the key and says what would be valid.

    `problems` holds every (key path, message) found in one pass, so a file's mistakes are reported
    together; a single problem reads exactly like its message.
    """

    def __init__(self, message: str = "", problems: list | None = None):
        self.problems = list(problems) if problems else [("", message)]
        super().__init__(message if problems is None else format_problems(self.problems))


def format_problems(problems: list) -> str:
    """One problem: its message. Several: a count, then the messages grouped by block (key path prefix)."""
    if len(problems) == 1:
        return problems[0][1]
    groups: dict[str, list[str]] = {}
    for key, message in problems:
        groups.setdefault(key.rpartition(".")[0] or "top level", []).append(message)
    lines = [f"{len(problems)} problems in the config (fix them all, then run again):"]
    for block, messages in groups.items():
        lines.append(f"  [{block}]")
        lines.extend(f"    - {message}" for message in messages)
    return "\n".join(lines)


def collected(problems: list) -> "ConfigError":
    return ConfigError(problems=problems)


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The values a numeric field takes, in interval notation: "[1, inf)", "(0, 1]", "(-inf, inf)" (any finite
    number). `also`: values outside the interval that keep a meaning of their own (ROLL's top_k: -1 = off).
    NaN is never inside."""

    low: float
    high: float
    low_open: bool
    high_open: bool
    also: tuple = ()

    @classmethod
    def parse(cls, text: str, also=()) -> "Bounds":
        match = re.fullmatch(r"\s*([\[(])\s*(\S+?)\s*,\s*(\S+?)\s*([\])])\s*", text)
        if not match:
            raise ValueError(f"bounds {text!r}: expected interval notation such as '[1, inf)'")
        opening, low, high, closing = match.groups()
        return cls(float(low), float(high), opening == "(", closing == ")", tuple(also))

    def allows(self, value) -> bool:
        if value in self.also:
            return True
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self) -> str:
        def number(x):
            return str(int(x)) if float(x).is_integer() else str(x)

        if self.low == -math.inf and self.high == math.inf:
            text = "a finite number" if self.low_open and self.high_open else "a number (not NaN)"
        elif self.high == math.inf:
            text = f"{'>' if self.low_open else '≥'} {number(self.low)}"
        elif self.low == -math.inf:
            text = f"{'<' if self.high_open else '≤'} {number(self.high)}"
        else:
            opening, closing = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"in {opening}{number(self.low)}, {number(self.high)}{closing}"
        return text + "".join(f" or {number(v)}" for v in self.also)


def field_help(
    default=dataclasses.MISSING,
    help: str = "",
    default_factory=dataclasses.MISSING,
    bounds: str | None = None,
    also=(),
):
    """A dataclass field documented where it is declared (the help text feeds docs/configuration.md).

    `bounds` (interval notation, see Bounds; required for every int and float field) is checked by `build`
    together with every other problem of the file; a list's or mapping's bounds apply to each of its numbers."""
    metadata = {"help": help}
    if bounds is not None:
        metadata["bounds"] = Bounds.parse(bounds, also)
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def out_of_bounds(field, value, path: str) -> list:
    """(path, message) for the value (or each list element) of `field` outside its Bounds."""
    bounds = field.metadata.get("bounds")
    if bounds is None:
        return []
    if isinstance(value, dict):
        items = ((f"{path}.{key}", item) for key, item in value.items())
    else:
        items = ((f"{path}[{i}]", item) for i, item in enumerate(value)) if isinstance(value, list) else [(path, value)]
    problems = []
    for where, item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float)) or bounds.allows(item):
            continue
        if isinstance(item, float) and not math.isfinite(item):  # "must be ≥ 0" alone would hide what is wrong
            problems.append((where, f"'{where}' = {item!r} is not a finite number: must be {bounds.describe()}"))
        else:
            problems.append((where, f"'{where}' = {item!r}: must be {bounds.describe()}"))
    return problems


def closest(name: str, candidates) -> str:
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean '{match[0]}'?" if match else ""


def build(cls, data: dict, path: str = ""):
    """`cls(**data)` with every key and value checked; `path` prefixes key names in errors."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path or 'the config'}: expected a mapping of {cls.__name__} keys, got {type(data).__name__} {data!r}"
        )
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    problems = []  # every mistake of this block and the blocks inside it, reported together
    for key in data:
        if key not in fields:
            problems.append(
                (
                    _join(path, key),
                    f"unknown key '{_join(path, key)}'{closest(str(key), fields)} "
                    f"(valid keys of {path or 'the top level'}: {', '.join(sorted(fields))})",
                )
            )
    values = {}
    for name, field in fields.items():
        key_path = _join(path, name)
        if name in data:
            try:
                values[name] = convert(hints[name], data[name], key_path)
            except ConfigError as error:
                problems.extend((p or key_path, m) for p, m in error.problems)
            else:
                problems.extend(out_of_bounds(field, values[name], key_path))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            problems.append((key_path, f"missing required key '{key_path}': {field.metadata.get('help', '')}"))
    if problems:
        raise collected(problems)
    try:
        return cls(**values)
    except ConfigError as error:  # a block's own check names its field bare ('temperature'): give the full path
        message = str(error)
        for name in fields:
            if path and message.startswith(f"'{name}'"):
                raise ConfigError(f"'{_join(path, name)}'{message[len(name) + 2 :]}") from None
        raise


def convert(hint, value, path: str):
    """Check (and build, for dataclasses) one value against its type hint."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return convert(option, value, path)
            except ConfigError as error:
                errors.append((option, error))
        if len(errors) == 1:
            raise errors[0][1]
        mappings = [error for option, error in errors if _is_mapping_type(option)]
        if isinstance(value, dict) and len(mappings) > 1:
            # a mapping for several mapping types (one role, or name → role): the problems of the form it comes
            # closest to (fewest problems; the first such option), not a bare "expected X or Y"
            raise min(mappings, key=lambda error: len(error.problems))
        raise ConfigError(f"'{path}' = {value!r}: expected {describe(hint)}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(
                f"'{path}' = {value!r} is not allowed; choose one of {list(args)}{closest(str(value), map(str, args))}"
            )
        return value
    if dataclasses.is_dataclass(hint):
        return build(hint, value, path)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"'{path}' = {value!r}: expected a list of {describe(args[0])}")
        return _convert_all(args[0], enumerate(value), lambda i: f"{path}[{i}]", list)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"'{path}' = {value!r}: expected a mapping")
        if not args:
            return dict(value)
        return _convert_all(args[1], value.items(), lambda key: _join(path, key), dict)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool):
        if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
            return value
        raise ConfigError(f"'{path}' = {value!r} ({type(value).__name__}): expected {describe(hint)}")
    raise TypeError(f"roll.configs: no converter for the type {hint!r} of '{path}'")


def _is_mapping_type(hint) -> bool:
    return dataclasses.is_dataclass(hint) or typing.get_origin(hint) is dict or hint is dict


def _convert_all(hint, items, name, container):
    """Convert every item, collecting the problems of all of them before raising."""
    converted, problems = [], []
    for key, item in items:
        try:
            converted.append((key, convert(hint, item, name(key))))
        except ConfigError as error:
            problems.extend((p or name(key), m) for p, m in error.problems)
    if problems:
        raise collected(problems)
    return dict(converted) if container is dict else [item for _, item in converted]


def describe(hint) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if origin is Literal:
        return f"one of {list(args)}"
    if origin is list:
        return f"a list of {describe(args[0])}"
    if origin is dict or hint is dict:
        return "a mapping"
    if hint is type(None):
        return "null"
    if dataclasses.is_dataclass(hint):
        return f"a {hint.__name__} mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(hint, str(hint))


# More device ids than one role of any cluster has: refused before the list is built (list(range(0, 10**9)) would
# take gigabytes, and the message naming it megabytes).
MAX_DEVICE_IDS = 65_536


def shorten(value, limit: int = 120) -> str:
    """repr(value), cut to `limit` characters with the count of what was left out (a message stays one line)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}… ({len(text):,} characters)"


def describe_ids(ids: list, shown: int = 8) -> str:
    """A device-id list for a message: all of a short one; the first and last few of a long one, with the count."""
    if len(ids) <= 2 * shown:
        return str(list(ids))
    head, tail = ", ".join(map(str, ids[:shown])), ", ".join(map(str, ids[-2:]))
    return f"[{head}, …, {tail}] ({len(ids):,} ids)"


_RANGE = re.compile(r"^\s*list\(\s*range\(\s*(-?\d+)\s*(?:,\s*(-?\d+)\s*)?(?:,\s*(-?\d+)\s*)?\)\s*\)\s*$")
_LIST = re.compile(r"^(list\()?\[\s*((?:\d+\s*,\s*)*\d+)\s*,?\s*\](?(1)\))$")  # list([...]) or [...]


def parse_device_mapping(value, path: str):
    """A YAML list of ints, or a string of ROLL's forms parsed without eval(): 'list(range(a, b[, step]))',
    'list([0, 1, 8, 9])', '[6, 7]', or such parts joined by '+'."""
    if isinstance(value, list) and len(value) > MAX_DEVICE_IDS:
        raise ConfigError(
            f"'{path}' names {len(value):,} device ids; a role's device_mapping holds at most num_nodes × "
            f"num_gpus_per_node ids (roll plans at most {MAX_DEVICE_IDS:,})"
        )
    if value is None or isinstance(value, list):
        return value
    if isinstance(value, str):
        ids = []
        for part in value.split("+"):
            part = part.strip()
            match = _RANGE.match(part)
            literal = _LIST.match(part)
            if match:
                numbers = [int(g) for g in match.groups() if g is not None]
                if len(numbers) == 3 and numbers[2] == 0:
                    raise ConfigError(f"'{path}' = {shorten(value)}: the range step must not be 0")
                count = len(range(*numbers))  # before building it
                if len(ids) + count > MAX_DEVICE_IDS:
                    raise ConfigError(
                        f"'{path}' = {shorten(value)} names {len(ids) + count:,} device ids; a role's device_mapping "
                        f"holds at most num_nodes × num_gpus_per_node ids (roll plans at most {MAX_DEVICE_IDS:,})"
                    )
                ids += list(range(*numbers))
            elif literal:
                ids += [int(n) for n in re.findall(r"\d+", literal.group(2))]
            else:
                break
        else:
            return ids
    raise ConfigError(
        f"'{path}' = {shorten(value)}: expected a list of device ids such as [0, 1, 2, 3] or a string such as "
        f"'list(range(0, 4))', 'list([0, 1, 8, 9])' or 'list(range(0, 4)) + list(range(8, 12))'"
    )


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)
