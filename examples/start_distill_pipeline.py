"""Run an offline distillation pipeline (roles student and teacher) from a Hydra-composed YAML.

    python examples/start_distill_pipeline.py                        # the embedded tiny demo (CPU)
    python examples/start_distill_pipeline.py --config_path DIR --config_name NAME [key=value ...] [--dry_run]

With no --config_path the embedded demo runs (examples/distill_demo/distill_tiny.yaml): its folder
(./demo_data/distill: the warm-started tiny student, a wider teacher trained on the task, the rows) is prepared first
when missing, and the student's held-out greedy accuracy is printed before and after, beside the teacher's.
--config_path is a directory (absolute, relative to the current directory, or relative to examples/). --dry_run
composes and validates the config, runs the start-up checks on what this machine has, prints it with the batch
arithmetic and the placement plan, and exits without starting Ray.
"""

import sys
from pathlib import Path

from roll.cli import launch_kind

EXAMPLES = Path(__file__).resolve().parent


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    demo = not any(a.startswith(("--config_path", "--config_name", "-h", "--help")) for a in argv)
    if not demo or "--dry_run" in argv:
        return launch_kind("distill", argv, __doc__, EXAMPLES)
    sys.path.insert(0, str(EXAMPLES / "distill_demo"))
    from prepare_demo import run_demo  # noqa: E402

    return run_demo(lambda: launch_kind("distill", argv, __doc__, EXAMPLES), argv)


if __name__ == "__main__":
    sys.exit(main())
