"""The tier table (tests/tiers.py) covers every test file on disk, names nothing that is gone, and its quick tier
reaches every package of roll; the collection hook refuses a test with no tier or two."""

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib

from tests.conftest import _mark_tiers
from tests.tiers import TIER_NAMES, TIERS, tier_of

TESTS = Path(__file__).resolve().parent
ROLL = TESTS.parent / "roll"


def _test_files() -> dict[str, ast.Module]:
    return {path.relative_to(TESTS).as_posix(): ast.parse(path.read_text()) for path in TESTS.rglob("test_*.py")}


def _test_functions(tree: ast.Module) -> list[str]:
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    ]


def test_every_test_file_and_function_has_a_tier():
    missing = [
        f"{path}::{name}"
        for path, tree in _test_files().items()
        for name in [None, *_test_functions(tree)]
        if tier_of(f"{path}::{name}" if name else path) is None
    ]
    assert not missing, f"add these to TIERS in tests/tiers.py: {missing}"


def test_every_table_entry_names_a_folder_file_or_test_that_exists_and_a_known_tier():
    files = _test_files()
    for key, tier in TIERS.items():
        assert tier in TIER_NAMES, f"{key}: tier {tier!r}; known: {TIER_NAMES}"
        path, _, name = key.partition("::")
        if key.endswith("/"):
            assert (TESTS / path).is_dir(), f"TIERS[{key!r}]: no folder tests/{path}"
        elif name:
            assert name in _test_functions(files.get(path, ast.Module(body=[]))), f"TIERS[{key!r}]: no such test"
        else:
            assert path in files, f"TIERS[{key!r}]: no file tests/{path}"


def test_the_markers_registered_in_pyproject_are_the_tiers():
    ini = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert [line.split(":")[0] for line in ini["markers"]] == list(TIER_NAMES)
    assert "--strict-markers" in ini["addopts"]  # a misspelled `-m`-able marker is an error, not a new tier


def _imported_roll_packages(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):  # function-local imports too: many tests import inside the test
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name.split(".")[1] for name in names if name.startswith("roll.") and name.count(".") >= 1}


def test_the_quick_tier_reaches_every_package_of_roll():
    packages = {path.parent.name for path in ROLL.glob("*/__init__.py")}
    reached = set()
    for path, tree in _test_files().items():
        if tier_of(path) == "quick" or any(tier_of(f"{path}::{name}") == "quick" for name in _test_functions(tree)):
            reached |= _imported_roll_packages(tree)
    assert packages <= reached, f"no quick test imports roll.{sorted(packages - reached)}"


def _item(relative: str, name: str, marks=()):
    added = []
    return SimpleNamespace(
        path=TESTS / relative,
        name=name,
        originalname=name,
        nodeid=f"tests/{relative}::{name}",
        iter_markers=lambda: [SimpleNamespace(name=m) for m in marks],
        add_marker=added.append,
        added=added,
    )


def test_the_collection_hook_marks_by_the_table_and_refuses_a_test_without_a_tier_or_with_two():
    quick, per_test = (
        _item("algorithms/test_kl.py", "test_x"),
        _item("pipeline/test_agentic.py", "test_frozen_lake_demo_learns"),
    )
    _mark_tiers([quick, per_test])
    assert quick.added == ["quick"] and per_test.added == ["learning"]
    with pytest.raises(pytest.UsageError, match=r"tests/new_area/test_new.py::test_y: no tier"):
        _mark_tiers([_item("new_area/test_new.py", "test_y")])
    with pytest.raises(pytest.UsageError, match=r"test_z: \['gpu', 'quick'\]"):
        _mark_tiers([_item("algorithms/test_kl.py", "test_z", marks=["gpu"])])
    agreeing = _item("gpu/test_x.py", "test_w", marks=["gpu"])
    _mark_tiers([agreeing])  # a module's own pytestmark that agrees with the table
    assert agreeing.added == ["gpu"]
