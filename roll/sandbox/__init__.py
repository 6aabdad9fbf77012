"""Run untrusted (model-generated) Python in a separate, limited process."""

from roll.sandbox.runner import SandboxResult, capabilities, run_python

__all__ = ["SandboxResult", "run_python", "capabilities"]
