"""The pipeline kinds are siblings: what both use lives in roll/pipeline/base.py and roll/pipeline/core/, and
neither they nor the agentic pipeline import the RLVR one (docs/architecture.md)."""

import ast
from pathlib import Path

ROLL = Path(__file__).resolve().parents[1] / "roll"


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def test_shared_pipeline_code_and_agentic_import_nothing_from_rlvr():
    files = [ROLL / "pipeline" / "base.py", *(ROLL / "pipeline" / "core").rglob("*.py")]
    files += [*(ROLL / "pipeline" / "agentic").rglob("*.py"), *(ROLL / "agentic").rglob("*.py")]
    offenders = {
        str(path.relative_to(ROLL.parent)): sorted(
            m for m in imported_modules(path) if m.startswith("roll.pipeline.rlvr")
        )
        for path in files
    }
    assert not {path: mods for path, mods in offenders.items() if mods}
