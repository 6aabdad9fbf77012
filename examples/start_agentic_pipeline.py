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

from roll.cli import launch


def main(argv=None) -> int:
    from roll.configs import load_agentic_config
    from roll.pipeline.agentic.first_prompts import check_first_prompts_on_disk

    def load(composed):  # a first prompt longer than prompt_length is refused here, by --dry_run too
        return check_first_prompts_on_disk(load_agentic_config(composed))

    def run(config):
        from roll.pipeline.agentic import run_pipeline

        return run_pipeline(config)

    return launch(argv, __doc__, Path(__file__).resolve().parent, "agentic_demo", "frozen_lake_traj", load, run)


if __name__ == "__main__":
    sys.exit(main())
