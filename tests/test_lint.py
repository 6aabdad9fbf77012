"""The tree is ruff-clean (pyproject.toml [tool.ruff]). Fix with `ruff format . && ruff check --fix .`."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff(command):
    ruff = shutil.which("ruff")
    assert ruff, "ruff is not installed: `bash scripts/install.sh test` installs it (the test extra)"
    done = subprocess.run([ruff, *command], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"ruff {' '.join(command)} failed:\n{done.stdout}{done.stderr}"
