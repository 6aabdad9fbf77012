"""Dynamic sampling on the tiny RLVR demo: held-out accuracy per step and wall time, filter off vs on.

    python examples/tiny_rlvr/prepare_demo.py --output_dir demo_data
    python benchmarks/dynamic_sampling_demo.py --demo_dir demo_data --steps 40 --eval_steps 2 --bar 0.5

Each setting runs the shipped demo config (examples/tiny_rlvr/rlvr_tiny.yaml) with the same seed; "on" adds
rewards.math.query_filter_config {type: std_filter, std_threshold: 0} (drop all-equal groups) with
is_use_additional_prompts. Prints one JSON line per setting: the val/score/all curve, the first step that
reaches the bar, wall time, and the mean dynamic-sampling counts per step.
"""

import argparse
import json
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tiny_rlvr"
SETTINGS = {
    "off": [],
    "on": [
        "+rewards.math.query_filter_config.type=std_filter",
        "+rewards.math.query_filter_config.filter_args.std_threshold=0.0",
        "+is_use_additional_prompts=true",
        "+max_additional_running_prompts=128",
    ],
}


def run(setting: str, demo: Path, steps: int, eval_steps: int, out: Path) -> dict:
    from roll.configs import compose_config
    from roll.pipeline.rlvr import run_pipeline
    from roll.pipeline.rlvr.config import load_rlvr_config

    overrides = [
        f"model_path={demo / 'model'}",
        f"actor_train.data_args.file_name={demo / 'train.jsonl'}",
        f"validation.data_args.file_name={demo / 'heldout.jsonl'}",
        f"output_dir={out / setting}",
        f"max_steps={steps}",
        f"eval_steps={eval_steps}",
        "track_with=stdout",
        *SETTINGS[setting],
    ]
    config = load_rlvr_config(compose_config(str(EXAMPLES), "rlvr_tiny", overrides))
    started = time.perf_counter()
    history = run_pipeline(config)
    wall = time.perf_counter() - started
    curve = {0: history["before"]["val/score/all"]}
    curve.update({s + 1: m["val/score/all"] for s, m in history["steps"].items() if "val/score/all" in m})
    extra = {
        key: sum(m.get(key, 0) for m in history["steps"].values()) / len(history["steps"])
        for key in ("dynamic_sampling/math/groups_dropped", "dynamic_sampling/extra_prompts")
    }
    rewards = [m["critic/score/mean"] for m in history["steps"].values()]
    return {
        "setting": setting,
        "wall_s": round(wall, 1),
        "val_curve": curve,
        "train_reward": rewards,
        "per_step_mean": extra,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo_dir", type=Path, default=Path("demo_data"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--eval_steps", type=int, default=2)
    parser.add_argument("--bar", type=float, default=0.5, help="held-out accuracy (val/score/all) to reach")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--output_dir", type=Path, default=Path("output/dynamic_sampling_demo"))
    args = parser.parse_args()
    for setting in args.settings:
        result = run(setting, args.demo_dir.resolve(), args.steps, args.eval_steps, args.output_dir.resolve())
        reached = [step for step, value in result["val_curve"].items() if value >= args.bar]
        result["first_step_at_bar"] = reached[0] if reached else None
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
