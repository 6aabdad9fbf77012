"""Run an agentic (multi-turn, environment) pipeline from a Hydra-composed YAML.

    python examples/start_agentic_pipeline.py                     # the FrozenLake demo (CPU)
    python examples/start_agentic_pipeline.py --config_path DIR --config_name NAME [key=value ...] [--dry_run]

Prepare the demo model first: python examples/agentic_demo/prepare_demo.py --output_dir agentic_demo_data
--config_path is a directory (absolute, relative to the current directory, or relative to examples/).
--dry_run composes and validates the config, runs the start-up checks on what this machine has (model
directories, classes, templates, data files, sizes: docs/reliability.md), prints it with the environment plan and the
placement plan, and exits without starting Ray.
"""

import sys
from pathlib import Path

from roll.cli import launch_kind


def main(argv=None) -> int:
    return launch_kind("agentic", argv, __doc__, Path(__file__).resolve().parent)


if __name__ == "__main__":
    sys.exit(main())
