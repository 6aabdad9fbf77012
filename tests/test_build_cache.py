"""The fixtures' build cache (tests/build_cache.py): the key follows the builder's sources, settings and
versions; entries are complete, atomic and checked on every use."""

import json

import pytest

from tests import build_cache
from tests.build_cache import cache_key, cached_build, cached_copy, key_inputs, source_files


@pytest.fixture
def sources(tmp_path):
    """A small `roll` package: builder → helper (imported inside a function) → leaf (relative import)."""
    files = {
        "roll/__init__.py": "",
        "roll/demo/__init__.py": "",
        "roll/demo/builder.py": "import json\n\ndef build():\n    from roll.utils import helper\n    return helper\n",
        "roll/utils/__init__.py": "",
        "roll/utils/helper.py": "from .leaf import VALUE\n",
        "roll/utils/leaf.py": "VALUE = 1\n",
        "roll/utils/unrelated.py": "OTHER = 2\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_sources_are_the_transitive_imports(sources):
    found = [str(p.relative_to(sources)) for p in source_files(["roll.demo.builder"], sources)]
    assert found == [
        "roll/__init__.py",
        "roll/demo/__init__.py",
        "roll/demo/builder.py",
        "roll/utils/__init__.py",
        "roll/utils/helper.py",
        "roll/utils/leaf.py",
    ]


def test_key_changes_with_an_imported_source_file_the_settings_and_versions(sources, monkeypatch):
    def key(settings=(("steps", 40),)):
        return cache_key(key_inputs("demo", ["roll.demo.builder"], settings, sources))

    first = key()
    (sources / "roll/utils/unrelated.py").write_text("OTHER = 3\n")  # not imported by the builder
    assert key() == first
    (sources / "roll/utils/leaf.py").write_text("VALUE = 2\n")  # two imports away, through a relative one
    changed = key()
    assert changed != first
    assert key((("steps", 41),)) != changed
    monkeypatch.setattr(build_cache, "_version", lambda name: "0.0-other")
    assert key() != changed


def test_the_demo_builders_keys_cover_their_code():
    agentic = {str(p.relative_to(build_cache.package_root())) for p in source_files(["roll.demo.agentic"])}
    assert {
        "roll/demo/agentic.py",
        "roll/demo/tiny_model.py",
        "roll/demo/warm_start.py",
        "roll/agentic/envs/sokoban.py",
        "roll/agentic/envs/frozen_lake.py",
        "roll/agentic/env_managers/step.py",
    } <= agentic
    rlvr = {str(p.relative_to(build_cache.package_root())) for p in source_files(["roll.demo.rlvr"])}
    assert {"roll/demo/rlvr.py", "roll/demo/task.py", "roll/demo/warm_start.py", "roll/utils/functional.py"} <= rlvr


def test_an_entry_is_built_once_and_a_partial_or_altered_one_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLL_TEST_CACHE", str(tmp_path / "cache"))
    builds = []

    def build(directory):
        builds.append(directory)
        (directory / "model").mkdir()
        (directory / "model" / "weights.bin").write_bytes(b"w" * 10)

    inputs = {"name": "demo", "settings": 1}
    entry = cached_build("demo", inputs, build)
    assert entry.parent == tmp_path / "cache" and len(builds) == 1
    assert builds[0] != entry and not builds[0].exists()  # built elsewhere, renamed into place
    assert json.loads((entry / build_cache.MANIFEST).read_text())["inputs"] == inputs
    assert cached_build("demo", inputs, build) == entry and len(builds) == 1

    for corrupt in (
        lambda: (entry / "model" / "weights.bin").write_bytes(b"w" * 5),  # truncated
        lambda: (entry / "model" / "extra.txt").write_text("x"),  # written into by someone
        lambda: (entry / build_cache.MANIFEST).unlink(),  # the build did not finish
    ):
        corrupt()
        assert cached_build("demo", inputs, build) == entry
        assert (entry / "model" / "weights.bin").read_bytes() == b"w" * 10
        assert not (entry / "model" / "extra.txt").exists()
    assert len(builds) == 4

    copy = cached_copy(tmp_path / "copy", "demo", [], 1, build)
    assert sorted(p.name for p in copy.rglob("*")) == ["model", "weights.bin"]  # no manifest in the copy


def test_a_failed_build_leaves_no_entry(tmp_path):
    def build(directory):
        (directory / "half.bin").write_bytes(b"x")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        cached_build("demo", {"n": 1}, build, root=tmp_path)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
