"""Run on-policy distillation (ROLL's pure OPD: the student's advantages are its teachers' KL alone) from a
Hydra-composed YAML.

    python examples/start_onpolicy_distill_pipeline.py       # the embedded tiny demo (CPU; prepares ./demo_data)
    python examples/start_onpolicy_distill_pipeline.py --config_path DIR --config_name NAME [key=value ...] [--dry_run]

ROLL's keys: student_train, student_infer, teacher (one role, or name → role with opd_kl_coef and tag_included),
kl_penalty (kl, abs, mse, k3); docs/onpolicy_distill.md. --config_path is a directory (absolute, relative to the
current directory, or relative to examples/). --dry_run composes and validates the config, runs the start-up checks
on what this machine has (model directories, classes, templates, data files, sizes: docs/reliability.md), prints it
with the batch arithmetic and the placement plan, and exits without starting Ray.
"""

import importlib.util
import sys
import time
from pathlib import Path

from roll.cli import launch_kind

EXAMPLES = Path(__file__).resolve().parent
DEMO_DATA = Path("demo_data")  # the default YAML's ./demo_data


def prepare_default_demo(argv) -> None:
    """The default run (no --config_path / --config_name; not --dry_run, which only checks): prepare ./demo_data
    when it is missing or outdated."""
    if any(arg.startswith(("--config_path", "--config_name", "--dry_run", "-h", "--help")) for arg in argv):
        return
    spec = importlib.util.spec_from_file_location("opd_prepare", EXAMPLES / "onpolicy_distill_demo" / "prepare_demo.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    started = time.perf_counter()
    summaries = prepare.prepare(DEMO_DATA, log=lambda line: None)
    if summaries["built"]:
        print(
            f"prepared the demo's student, data and teacher in ./{DEMO_DATA} in {time.perf_counter() - started:.0f} s "
            f"(seeded; student held-out accuracy {100 * summaries['student']['heldout_accuracy']:.1f}%, teacher "
            f"{100 * summaries['teacher']['heldout_accuracy']:.1f}%)",
            flush=True,
        )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    prepare_default_demo(argv)
    return launch_kind("onpolicy_distill", argv, __doc__, EXAMPLES)


if __name__ == "__main__":
    sys.exit(main())
