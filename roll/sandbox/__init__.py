"""Run untrusted (model-generated) Python in a kernel-isolated sandbox."""

from roll.sandbox.isolation import SandboxUnavailable
from roll.sandbox.runner import SandboxResult, capabilities, layers, require_isolation, run_python

__all__ = ["SandboxResult", "SandboxUnavailable", "run_python", "capabilities", "layers", "require_isolation"]
