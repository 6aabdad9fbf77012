"""A content-addressed cache for directories that test fixtures build by training (the demo models and data).

Such a directory is a deterministic function of (a) the code that builds it, (b) the builder's settings and
(c) the library versions that shape the numbers. The cache key hashes all three:
    (a) the bytes of every `roll` source file the builder imports, transitively (found statically: every
        `import roll...` / `from roll... import` in those files, inside functions too, plus the packages'
        `__init__.py`), so an edit of e.g. roll/demo/warm_start.py or roll/agentic/envs/sokoban.py changes it;
    (b) the settings (any JSON-serialisable value, e.g. `dataclasses.asdict(settings)`);
    (c) the Python, torch, transformers and tokenizers versions.

An entry is built into a temporary directory next to it and renamed into place; its manifest (the key's
inputs and a sha256 of every file) is written last and checked on every use, so a partial, corrupt or
altered entry is rebuilt. Builders of the same entry in concurrent test sessions are serialised by a lock
file. Fixtures copy the entry into their own temporary directory (`cached_copy`), so no test can write into
the cache.

Root: $ROLL_TEST_CACHE, default ~/.cache/roll-tests (a CI can keep it between runs). Entries of outdated keys
are not removed; delete the folder to reclaim the space (each entry is about 1 MB). `python -m tests.build_cache`
lists the entries.
"""

import ast
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANIFEST = ".manifest.json"
VERSIONED = ("torch", "transformers", "tokenizers")


def cache_root() -> Path:
    """$ROLL_TEST_CACHE, else ~/.cache/roll-tests; a folder in the temp directory when that is not writable."""
    root = Path(os.environ.get("ROLL_TEST_CACHE") or Path.home() / ".cache" / "roll-tests").expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK):
            return root
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / "roll-tests-cache"


# ---- the key ----------------------------------------------------------------------------------------------
def package_root(package: str = "roll") -> Path:
    """The folder holding the `package` this process imports (this checkout, or an installed copy): the sources
    the key hashes are the ones that run."""
    import importlib.util

    return Path(importlib.util.find_spec(package).origin).resolve().parents[1]


def _module_file(module: str, source_root: Path) -> Path | None:
    path = source_root.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(file: Path, module: str, package: str) -> set[str]:
    """Dotted names of `package` modules that `file` (module `module`) may import, anywhere in its body."""
    is_package = file.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(file.read_bytes(), str(file))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, `level - 1` packages up
                parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*parts, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
    return {name for name in found if name == package or name.startswith(package + ".")}


def source_files(modules: Iterable[str], source_root: Path | None = None, package: str = "roll") -> list[Path]:
    """Every `package` source file that importing `modules` may execute: the modules, the `__init__.py` of
    their packages, and, transitively, what they import. Names that are not modules (`from roll.x import
    function`) are ignored."""
    source_root = package_root(package) if source_root is None else source_root
    pending, files = list(modules), set()
    seen = set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        pending.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        file = _module_file(module, source_root)
        if file is None:
            continue
        files.add(file)
        pending.extend(_imported_modules(file, module, package) - seen)
    return sorted(files)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def key_inputs(name: str, modules: Iterable[str], settings, source_root: Path | None = None) -> dict:
    """What the key hashes (also stored in the entry's manifest, to tell why two keys differ)."""
    source_root = package_root() if source_root is None else source_root
    return {
        "name": name,
        "settings": settings,
        "sources": {str(path.relative_to(source_root)): _sha256(path) for path in source_files(modules, source_root)},
        "versions": {"python": "{}.{}".format(*sys.version_info[:2]), **{d: _version(d) for d in VERSIONED}},
    }


def cache_key(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:24]


# ---- entries ----------------------------------------------------------------------------------------------
def _file_hashes(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): _sha256(path)
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }


def is_valid(entry: Path, key: str) -> bool:
    """The entry is complete (manifest written last) and unaltered (every file as built, no file added)."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("key") == key and manifest.get("files") == _file_hashes(entry)


def cached_entry(name: str, inputs: dict, root: Path | None = None) -> Path | None:
    """The valid cache entry for `inputs`, or None."""
    key = cache_key(inputs)
    entry = (cache_root() if root is None else root) / f"{name}-{key}"
    return entry if is_valid(entry, key) else None


def cached_build(name: str, inputs: dict, build: Callable[[Path], object], root: Path | None = None) -> Path:
    """The cache entry for `inputs` (see `key_inputs`), built by `build(directory)` unless a valid one exists."""
    key = cache_key(inputs)
    root = cache_root() if root is None else root
    entry = root / f"{name}-{key}"
    if is_valid(entry, key):
        return entry
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building it: wait, then look again
        if is_valid(entry, key):
            return entry
        for stale in root.glob(f".{name}-{key}.tmp*"):  # left by a build that was killed
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-{key}.tmp", dir=root))
        try:
            build(staging)
            manifest = {"key": key, "inputs": inputs, "files": _file_hashes(staging)}
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
            if entry.exists():  # corrupt or altered: move it aside first, a rename cannot replace a directory
                trash = Path(tempfile.mkdtemp(prefix=f".{name}-{key}.tmp-old", dir=root))
                entry.rename(trash / "entry")
                shutil.rmtree(trash, ignore_errors=True)
            staging.rename(entry)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return entry


def cached_copy(
    destination: Path, name: str, modules: Iterable[str], settings, build: Callable[[Path], object]
) -> Path:
    """`destination` (absent or empty) ← a copy of the cache entry of `build` (see the module docstring)."""
    entry = cached_build(name, key_inputs(name, modules, settings), build)
    shutil.copytree(entry, destination, ignore=shutil.ignore_patterns(MANIFEST), dirs_exist_ok=True)
    return destination


if __name__ == "__main__":
    for path in sorted(p for p in cache_root().glob("*-*") if p.is_dir() and not p.name.startswith(".")):
        valid = is_valid(path, path.name.rsplit("-", 1)[-1])
        print(f"{'ok     ' if valid else 'INVALID'} {path}")
