"""The distillation demo (examples/distill_demo) for the distillation pipeline tests: its preparation as a build-cache
entry (tests/build_cache.py) and configs composed from its shipped YAML."""

import hashlib
import importlib.util
from pathlib import Path

from tests.build_cache import REPO, cached_copy
from tests.pipeline.demo_cache import one_thread

DISTILL_DEMO = "distill-demo"
EXAMPLE = REPO / "examples" / "distill_demo"


def demo_module():
    """examples/distill_demo/prepare_demo.py as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("distill_prepare_demo", EXAMPLE / "prepare_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepared_distill_demo(directory: Path) -> Path:
    """`directory` ← the shipped demo's student, teacher and rows, from the build cache (~20 s when built)."""
    module = demo_module()

    def build(out: Path) -> None:
        with one_thread():
            module.prepare_distill_demo(out, log=lambda *_: None)
        (out.parent / f".{out.name}.lock").unlink(missing_ok=True)

    settings = {"prepare_demo.py": hashlib.sha256((EXAMPLE / "prepare_demo.py").read_bytes()).hexdigest()}
    return cached_copy(directory, DISTILL_DEMO, ["roll.demo.rlvr", "roll.demo.teacher"], settings, build)


def distill_config(demo: Path, output_dir: Path, *overrides: str):
    """The shipped demo YAML on `demo`'s files, writing under `output_dir`, with Hydra `overrides`."""
    from roll.configs import compose_config, load_config
    from roll.pipeline.distill.config import DistillConfig

    paths = [
        f"student_pretrain={demo / 'student' / 'model'}",
        f"teacher_pretrain={demo / 'teacher'}",
        f"student.data_args.file_name={demo / 'train.jsonl'}",
        f"validation.data_args.file_name={demo / 'heldout.jsonl'}",
        f"output_dir={output_dir}",
        "track_with=stdout",
    ]
    return load_config(DistillConfig, compose_config(str(EXAMPLE), "distill_tiny", [*paths, *overrides]))
