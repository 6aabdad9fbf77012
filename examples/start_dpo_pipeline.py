"""Run a DPO pipeline from a Hydra-composed YAML.

    python examples/start_dpo_pipeline.py                         # the embedded tiny demo (CPU)
    python examples/start_dpo_pipeline.py --config_path DIR --config_name NAME [key=value ...] [--dry_run]

--config_path is a directory (absolute, relative to the current directory, or relative to examples/).
--dry_run composes and validates the config, runs the start-up checks on what this machine has (model
directories, classes, templates, data files, sizes: docs/reliability.md), prints it with the batch arithmetic and the
placement plan, and exits without starting Ray.

The embedded demo (examples/dpo_demo/dpo_tiny.yaml) prepares ./dpo_demo_data first when it is missing (the RLVR
demo's warm-started tiny model and right/wrong answer pairs of its word problems), and after the run prints the
greedy held-out accuracy of the model before and after DPO.
"""

import importlib.util
import sys
import time
from pathlib import Path

from roll.cli import launch_kind
from roll.pipeline.kinds import kind_config

EXAMPLES = Path(__file__).resolve().parent


def _demo_module():
    spec = importlib.util.spec_from_file_location("dpo_demo_prepare", EXAMPLES / "dpo_demo" / "prepare_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _is_default(argv) -> bool:
    return not any(arg.split("=")[0] in ("--config_path", "--config_name") for arg in argv)


def prepare_default(data_dir: str = "dpo_demo_data") -> None:
    """The default demo's data and model, when ./dpo_demo_data does not hold them yet."""
    demo = _demo_module()
    started = time.perf_counter()
    summary = demo.prepare_dpo_demo(data_dir, log=lambda line: None)
    if not summary["skipped"]:
        print(
            f"prepared the DPO demo in ./{data_dir} ({summary['train_pairs']} training / {summary['heldout_pairs']} "
            f"held-out pairs, the warm-started tiny model) in {time.perf_counter() - started:.0f} s",
            flush=True,
        )


def report_demo(overrides: list[str]) -> None:
    """After the default demo's run: the greedy held-out accuracy of the model before and after DPO."""
    from roll.configs import compose_config
    from roll.pipeline.dpo.pipeline import final_model_dir
    from roll.pipeline.kinds import load_kind_config

    path, name = kind_config("dpo").DEFAULT_CONFIG
    config = load_kind_config("dpo", compose_config(str(EXAMPLES / path), name, overrides))
    demo, heldout = _demo_module(), config.validation.data_args.file_name
    before = demo.greedy_accuracy(config.reference.model_args.model_name_or_path, heldout)
    after = demo.greedy_accuracy(final_model_dir(config), heldout)
    print(f"DPO demo: greedy held-out accuracy {100 * before:.1f}% (before) -> {100 * after:.1f}% (after)", flush=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    demo = _is_default(argv) and "--dry_run" not in argv
    if demo:
        prepare_default()
    code = launch_kind("dpo", argv, __doc__, EXAMPLES)
    if demo and code == 0:
        report_demo([arg for arg in argv if not arg.startswith("--")])
    return code


if __name__ == "__main__":
    sys.exit(main())
