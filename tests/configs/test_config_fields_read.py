"""Every declared config field is read somewhere in roll/ (an accepted key nothing reads is a silent no-op)."""

import dataclasses
import re
import typing
from pathlib import Path

from roll.pipeline.kinds import kind_configs

ROLL = Path(__file__).resolve().parents[2] / "roll"


def config_classes(root, seen=None) -> list:
    """`root` and every dataclass reachable through its field types."""
    seen = [] if seen is None else seen
    if root in seen:
        return seen
    seen.append(root)
    for hint in typing.get_type_hints(root).values():
        for option in (hint, *typing.get_args(hint)):
            for inner in (option, *typing.get_args(option)):
                if dataclasses.is_dataclass(inner):
                    config_classes(inner, seen)
    return seen


def unread_fields(classes, sources: list[str]) -> list[str]:
    """Fields whose name appears in no source as an attribute access (`.name`) or a string key ('name')."""
    unread = []
    for cls in classes:
        for field in dataclasses.fields(cls):
            reads = re.compile(rf"\.{field.name}\b|[\"']{field.name}[\"']")
            if not any(reads.search(text) for text in sources):
                unread.append(f"{cls.__name__}.{field.name}")
    return unread


def test_every_config_field_is_read():
    sources = [path.read_text() for path in ROLL.rglob("*.py")]
    classes = []
    for kind in kind_configs().values():  # every kind of the table
        config_classes(kind, classes)
    assert len(classes) > 8
    assert unread_fields(classes, sources) == []


def test_an_unread_field_is_caught():
    @dataclasses.dataclass
    class Probe:
        zz_never_read_anywhere: int = 0

    assert unread_fields([Probe], [(ROLL / "configs" / "worker.py").read_text()]) == ["Probe.zz_never_read_anywhere"]
