"""Run an SFT pipeline (role sft_train) from a Hydra-composed YAML.

    python examples/start_sft_pipeline.py                        # the embedded tiny demo (CPU)
    python examples/start_sft_pipeline.py --config_path DIR --config_name NAME [key=value ...] [--dry_run]

With no --config_path the embedded demo runs (examples/sft_demo/sft_tiny.yaml): its model and data folder
(./demo_data/sft) is prepared first when missing, and the held-out greedy accuracy of the model is printed before
and after the fine-tuning. --config_path is a directory (absolute, relative to the current directory, or relative
to examples/). --dry_run composes and validates the config, runs the start-up checks on what this machine has,
prints it with the batch arithmetic and the placement plan, and exits without starting Ray.
"""

import sys
from pathlib import Path

from roll.cli import launch_kind

EXAMPLES = Path(__file__).resolve().parent


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    demo = not any(a.startswith(("--config_path", "--config_name", "-h", "--help")) for a in argv)
    if not demo or "--dry_run" in argv:
        return launch_kind("sft", argv, __doc__, EXAMPLES)
    sys.path.insert(0, str(EXAMPLES / "sft_demo"))
    from prepare_demo import run_demo  # noqa: E402

    return run_demo(lambda: launch_kind("sft", argv, __doc__, EXAMPLES), argv)


if __name__ == "__main__":
    sys.exit(main())
