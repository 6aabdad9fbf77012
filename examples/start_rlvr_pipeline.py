"""Run an RLVR pipeline from a Hydra-composed YAML.

    python examples/start_rlvr_pipeline.py                        # the embedded tiny demo (CPU)
    python examples/start_rlvr_pipeline.py --config_path DIR --config_name NAME [key=value ...] [--dry_run]

--config_path is a directory (absolute, relative to the current directory, or relative to examples/).
--dry_run composes and validates the config, runs the start-up checks on what this machine has (model
directories, classes, templates, data files, sizes: docs/reliability.md), prints it with the batch arithmetic and the
placement plan, and exits without starting Ray.
"""

import sys
from pathlib import Path

from roll.cli import launch_kind


def main(argv=None) -> int:
    return launch_kind("rlvr", argv, __doc__, Path(__file__).resolve().parent)


if __name__ == "__main__":
    sys.exit(main())
