"""Synchronous vs off-policy (async_generation_ratio) RLVR on the demo, in one run and one Ray session.

    OMP_NUM_THREADS=1 python benchmarks/async_rollout.py --demo_dir /tmp/demo [--steps 30] [--eval_steps 10]
        [--ratio 1] [--bar 0.3] [--modes sync,async,requests,partial]

Every pipeline uses the shipped demo config (examples/tiny_rlvr/rlvr_tiny.yaml: actor_train + reference on
virtual device 0, actor_infer on device 1), the same seed and data. Modes, run in the order given:
  sync      async_generation_ratio 0, batched generate calls (the default loop)
  async     async_generation_ratio --ratio, whole steps queued ahead (generate_opt_level 0)
  requests  async_generation_ratio --ratio, request-level rollout streaming to the rewards (generate_opt_level 1)
  partial   as requests, with partial_rollout: a weight sync aborts in-flight requests, resumed on new weights
Reported per mode: median wall time per step (validation excluded), the
median of each phase, and the wall time (training steps only) until held-out greedy accuracy first reaches
--bar (absolute; checked every --eval_steps). The demo folder is prepared when missing.
"""

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

CONFIG_DIR = Path(__file__).resolve().parents[1] / "examples" / "tiny_rlvr"
PHASES = (
    *("generate", "reward", "generate_and_reward", "old_log_probs", "ref_log_probs", "train", "rollout_wait"),
    "weight_sync",
)
MODES = {
    "sync": [],
    "async": ["async_generation_ratio={ratio}"],
    "requests": ["async_generation_ratio={ratio}", "generate_opt_level=1"],
    "partial": ["async_generation_ratio={ratio}", "generate_opt_level=1", "partial_rollout=true"],
}


def run_mode(demo: Path, out: Path, steps: int, eval_steps: int, extra: list[str]) -> dict:
    from roll.configs import compose_config
    from roll.pipeline.rlvr.config import load_rlvr_config
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    overrides = [
        f"model_path={demo / 'model'}",
        f"actor_train.data_args.file_name={demo / 'train.jsonl'}",
        f"validation.data_args.file_name={demo / 'heldout.jsonl'}",
        f"output_dir={out}",
        f"max_steps={steps}",
        f"eval_steps={eval_steps}",
        "track_with=stdout",
        *extra,
    ]
    config = load_rlvr_config(compose_config(str(CONFIG_DIR), "rlvr_tiny", overrides))
    with RLVRPipeline(config) as pipeline:
        return pipeline.run()


def summarise(history: dict, bar: float) -> dict:
    steps = [history["steps"][s] for s in sorted(history["steps"])]
    # timing/step includes validation on eval steps: subtract nothing, report steps without validation
    plain = [m["timing/step"] for m in steps if not any(k.startswith("val/") for k in m)]
    elapsed, reached = 0.0, None
    for index, metrics in enumerate(steps):
        elapsed += metrics["timing/step"] - metrics.get("timing/validation", 0.0)  # training time only
        if reached is None and metrics.get("val/score/all", -1.0) >= bar:
            reached = {"step": index + 1, "seconds": round(elapsed, 1), "val": metrics["val/score/all"]}
    return {
        "median_step_s": round(statistics.median(plain), 3),
        "phases_median_s": {p: round(statistics.median(m.get(f"timing/{p}", 0.0) for m in steps), 3) for p in PHASES},
        "train_steps_total_s": round(elapsed, 1),
        "val_before": history["before"].get("val/score/all"),
        "val_curve": {i + 1: m["val/score/all"] for i, m in enumerate(steps) if "val/score/all" in m},
        "bar_reached": reached,
        "lag_mean": round(statistics.mean(m["async/lag"] for m in steps), 3) if "async/lag" in steps[0] else None,
        "aborted_requests": sum(m.get("async/aborted_requests", 0) for m in steps),
        "partial_samples": sum(m.get("async/partial_samples", 0) for m in steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo_dir", default=os.path.join(tempfile.gettempdir(), "roll_demo_async"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval_steps", type=int, default=10)
    parser.add_argument("--ratio", type=int, default=1)
    parser.add_argument("--bar", type=float, default=0.3, help="held-out greedy accuracy to reach")
    parser.add_argument("--modes", default="sync,async,requests,partial", help=f"comma-separated, of {list(MODES)}")
    args = parser.parse_args()

    from roll.demo.rlvr import prepare_demo

    demo = Path(args.demo_dir)
    prepare_demo(demo)
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"--modes: unknown {unknown}; valid: {list(MODES)}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in modes:
            extra = [item.format(ratio=args.ratio) for item in MODES[name]]
            history = run_mode(demo, Path(tmp) / name, args.steps, args.eval_steps, extra)
            results[name] = summarise(history, args.bar)
            print(name, json.dumps(results[name]), flush=True)
    if "sync" not in results:
        return
    sync = results["sync"]
    for name, other in results.items():
        if name == "sync":
            continue
        line = f"{name} vs sync: median step {sync['median_step_s'] / other['median_step_s']:.2f}x"
        if sync["bar_reached"] and other["bar_reached"]:
            line += f", time to the bar {sync['bar_reached']['seconds'] / other['bar_reached']['seconds']:.2f}x"
        else:
            line += ", bar not reached by " + " and ".join(n for n in ("sync", name) if not results[n]["bar_reached"])
        print(line)


if __name__ == "__main__":
    main()
