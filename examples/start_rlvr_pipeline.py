"""Run an RLVR pipeline from a Hydra-composed YAML.

    python examples/start_rlvr_pipeline.py                        # the embedded tiny demo (CPU)
    python examples/start_rlvr_pipeline.py --config_path DIR --config_name NAME [key=value ...] [--dry_run]

--config_path is a directory (absolute, relative to the current directory, or relative to examples/).
--dry_run composes and validates the config, prints it with the batch arithmetic and the placement
plan, and exits without starting Ray.
"""
import argparse
import os
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent
DEFAULT_PATH, DEFAULT_NAME = "tiny_rlvr", "rlvr_tiny"


def config_dir(path: str) -> Path:
    for candidate in (Path(path), EXAMPLES / path):
        if candidate.is_dir():
            return candidate.resolve()
    raise SystemExit(f"--config_path {path!r}: no such directory (looked in {Path.cwd()} and {EXAMPLES})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config_path", default=DEFAULT_PATH, help="directory holding the YAML")
    parser.add_argument("--config_name", default=DEFAULT_NAME, help="YAML file name without .yaml")
    parser.add_argument("--dry_run", action="store_true", help="validate and print the plan, then exit")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides such as max_steps=5")
    args = parser.parse_args(argv)

    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        os.environ.setdefault(name, "1")  # one readable line per step instead of a bar per file read
    from roll.configs import ConfigError, compose_config, describe_config, load_rlvr_config

    try:
        config = load_rlvr_config(compose_config(str(config_dir(args.config_path)), args.config_name, args.overrides))
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    print(describe_config(config), flush=True)
    if args.dry_run:
        return 0
    from roll.pipeline.rlvr import run_pipeline

    run_pipeline(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
