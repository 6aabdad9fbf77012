"""Resolve `worker_cls: package.module.ClassName` strings from YAML (no eval)."""

import importlib


def import_class(dotted_path: str):
    module_name, _, class_name = dotted_path.rpartition(".")
    if not module_name:
        raise ValueError(f"worker_cls {dotted_path!r} must be a dotted path such as 'my_pkg.rewards.MyReward'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ImportError(
            f"worker_cls {dotted_path!r}: cannot import module {module_name!r} ({error}); "
            f"is it installed or on PYTHONPATH?"
        ) from error
    if not hasattr(module, class_name):
        raise ImportError(f"worker_cls {dotted_path!r}: module {module_name!r} has no {class_name!r}")
    return getattr(module, class_name)
