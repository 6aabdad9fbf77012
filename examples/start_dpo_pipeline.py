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

from roll.cli import launch

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


def run_demo(config) -> dict:
    """The default demo's run, then the greedy held-out accuracy of the model before and after it."""
    from roll.pipeline.dpo.pipeline import final_model_dir

    history = config.run()
    demo = _demo_module()
    heldout = config.validation.data_args.file_name
    before = demo.greedy_accuracy(config.reference.model_args.model_name_or_path, heldout)
    after = demo.greedy_accuracy(final_model_dir(config), heldout)
    print(f"DPO demo: greedy held-out accuracy {100 * before:.1f}% (before) -> {100 * after:.1f}% (after)", flush=True)
    return history


def main(argv=None) -> int:
    from roll.pipeline.kinds import kind_config

    argv = sys.argv[1:] if argv is None else list(argv)
    cls = kind_config("dpo")
    default = _is_default(argv)
    if default and "--dry_run" not in argv:
        prepare_default()

    def load(composed):
        from roll.configs import load_config

        return load_config(cls, composed).check_inputs()

    path, name = cls.DEFAULT_CONFIG
    return launch(argv, __doc__, EXAMPLES, path, name, load, run_demo if default else (lambda config: config.run()))


if __name__ == "__main__":
    sys.exit(main())
