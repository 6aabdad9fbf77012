"""The import graph of roll/ (module-level and function-local imports alike): a table of floors, each package
importing only from floors below it, and no import circle anywhere (docs/architecture.md)."""

import ast
from pathlib import Path

ROLL = Path(__file__).resolve().parents[1] / "roll"

# Longest prefix wins. A module imports from its own package (same prefix) or from a lower floor.
FLOORS = {
    "roll.utils": 0,
    "roll.platforms": 0,
    "roll.models": 1,  # model families beyond causal LMs (VL): loading, processors, their forward inputs
    "roll.algorithms": 1,
    "roll.distributed": 1,
    "roll.sandbox": 1,
    "roll.data": 2,
    "roll.strategies": 2,
    "roll.agentic.envs": 2,  # the environments: the config checks list and build them
    "roll.configs": 3,
    "roll.workers": 4,
    "roll.agentic": 4,  # env workers and managers read the agentic config
    "roll.demo": 5,
    "roll.pipeline": 5,
    "roll.cli": 6,
}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROLL.parent).with_suffix("").parts).removesuffix(".__init__")


MODULES = {module_name(path): path for path in ROLL.rglob("*.py")}


def imported_modules(path: Path) -> set[str]:
    """Every roll module `path` imports anywhere in its body (the longest existing module of each name)."""
    this = module_name(path)
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package of this module
                package = this if path.name == "__init__.py" else this.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            # `from package import submodule` imports the submodule; `from module import name`, the module
            names.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names)
    found = set()
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name.startswith("roll.") and name != this:
            found.add(name)
    return found


GRAPH = {name: imported_modules(path) for name, path in MODULES.items()}


def floor(module: str) -> tuple[str, int] | None:
    prefix = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len, default=None)
    return None if prefix is None else (prefix, FLOORS[prefix])


def test_every_package_has_a_floor():
    assert len(MODULES) > 100, f"read {len(MODULES)} modules under {ROLL}: the tree was not found"
    assert not sorted(m for m in MODULES if m != "roll" and floor(m) is None), "add the package to FLOORS"


def test_imports_go_down_the_floors():
    offenders = []
    for module, targets in GRAPH.items():
        if module == "roll":
            continue
        own, level = floor(module)
        for target in sorted(targets):
            target_prefix, target_level = floor(target)
            if target_prefix != own and target_level >= level:
                offenders.append(f"{module} (floor {level}) imports {target} (floor {target_level})")
    assert not offenders, "\n".join(offenders)


def test_no_import_circle():
    """Tarjan's strongly connected components over the module graph: each must be a single module."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    assert not circles, f"import circles: {circles}"


def test_shared_code_imports_no_kind_and_no_kind_imports_another():
    """The kinds of roll/pipeline/kinds.py are siblings: the shared code (configs, the thin pipeline, its core
    pieces, the environments) imports none of their folders, and no kind imports another's, except a kind that is
    a mode of another and says so in its package's `BUILDS_ON` (ROLL's pure on-policy distillation is a run of
    the RLVR pipeline with other advantages)."""
    import importlib

    from roll.pipeline.kinds import KINDS

    kinds = {name: f"roll.pipeline.{name}" for name in KINDS}
    assert all(package in MODULES for package in kinds.values()), "every kind is a package roll.pipeline.<kind>"

    def kind_of(module):
        return next(
            (name for name, package in kinds.items() if module == package or module.startswith(package + ".")), None
        )

    offenders = []
    for module, targets in GRAPH.items():
        own = kind_of(module)
        shared = own is None and module.startswith(("roll.configs", "roll.pipeline", "roll.agentic", "roll.workers"))
        for target in sorted(targets):
            other = kind_of(target)
            declared = own is not None and other in getattr(importlib.import_module(kinds[own]), "BUILDS_ON", ())
            if other is not None and (shared or other != own) and not declared and module != "roll.pipeline.kinds":
                offenders.append(f"{module} imports {target} (kind {other})")
    assert not offenders, "\n".join(offenders)
