"""Prepare the embedded SFT demo (tiny random model, word-problem rows); run it with held-out accuracy around it.

    python examples/sft_demo/prepare_demo.py --output_dir demo_data/sft [--seed 0] [--force]

Writes <output_dir>/model, train.jsonl, heldout.jsonl, validation.jsonl and prepared.json (sft_demo.py); re-running
with the same settings does nothing. `python examples/start_sft_pipeline.py` (no --config_path) calls `run_demo`:
prepare when missing, measure, fine-tune, measure again.
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 threads on 2 busy cores are 10-40x slower
for _name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
    os.environ.setdefault(_name, "1")  # one line per event, not a bar per model load
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sft_demo import SFTDemoSettings, heldout_accuracy, prepare_sft_demo  # noqa: E402

DEMO_DIR = "demo_data/sft"  # relative to the working directory, as sft_tiny.yaml's paths


def describe(accuracy: dict) -> str:
    return f"{100 * accuracy['accuracy']:.1f}% (well-formed replies {100 * accuracy['format_ok']:.0f}%)"


def run_demo(launch, argv) -> int:
    """The launcher's default path: prepare ./demo_data/sft when missing (one line with how long it took), the
    held-out greedy accuracy of the model before, `launch()` (the SFT run of sft_tiny.yaml with `argv`'s
    overrides), then the accuracy of the fine-tuned model."""
    started = time.perf_counter()
    summary = prepare_sft_demo(DEMO_DIR, log=lambda *_: None)
    if not summary["skipped"]:
        print(
            f"prepared the SFT demo in {DEMO_DIR} ({summary['train_rows']} training / {summary['heldout_rows']} "
            f"held-out rows, tiny random Qwen2) in {time.perf_counter() - started:.1f}s",
            flush=True,
        )
    before = heldout_accuracy(f"{DEMO_DIR}/model", DEMO_DIR)
    print(f"held-out greedy accuracy before SFT: {describe(before)}", flush=True)
    code = launch()
    if code != 0:
        return code
    from roll.configs import compose_config, load_config
    from roll.pipeline.sft.config import SFTConfig
    from roll.pipeline.sft.pipeline import final_model_dir
    from roll.utils.errors import UserError

    examples = Path(__file__).resolve().parents[1]
    path, name = SFTConfig.DEFAULT_CONFIG
    config = load_config(SFTConfig, compose_config(str(examples / path), name, [a for a in argv if "=" in a]))
    try:
        model_dir = final_model_dir(config)
    except UserError as error:  # e.g. save_steps=0 given on the command line: nothing to evaluate
        print(f"error: the held-out accuracy after SFT needs the last step's model: {error}", file=sys.stderr)
        return 2
    after = heldout_accuracy(model_dir, DEMO_DIR)
    print(f"held-out greedy accuracy: {describe(before)} before SFT -> {describe(after)} after", flush=True)
    return 0


def main() -> None:
    defaults = SFTDemoSettings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    args = parser.parse_args()
    s = prepare_sft_demo(args.output_dir, SFTDemoSettings(seed=args.seed), force=args.force)
    print(
        f"SFT demo in {args.output_dir}: {s['train_rows']} training / {s['heldout_rows']} held-out rows"
        + (" [cached]" if s["skipped"] else f" [{s['seconds']:.1f}s]")
    )


if __name__ == "__main__":
    main()
