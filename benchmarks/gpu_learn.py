"""A 0.36 B model learns the demo task on one GPU in bf16: built here, warm-started, then GRPO through the project's
launcher; held-out greedy accuracy before RL and after.

    python benchmarks/gpu_learn.py [--steps 40] [--eval_steps 10] [--lr 3e-5] [--warm_start_steps 300]
        [--warm_start_lr 1e-4] [--work_dir DIR] [--json FILE] [--dry_run]
    python benchmarks/gpu_learn.py --tiny        # CPU: the demo's own size, float32, 4 steps (what CI runs)

1. Task and tokenizer: the embedded demo's (roll/demo/task.py: word problems whose answer is the sum of two
   numbers 1..4, held out by phrasing; roll/demo/tiny_model.py's byte-level BPE tokenizer with the demo's small
   vocabulary, a few hundred tokens, so the 0.36 B parameters are nearly all in the transformer body).
2. Model: a random-init Qwen2 of the 0.36 B shape of benchmarks/gpu_scale.py (hidden 896, 24 layers, 14 query /
   2 KV heads, intermediate 4864), saved in float32.
3. Warm start: the demo's own (roll/demo/warm_start.py, "reading": one-number sentences read back as \\boxed{N};
   never a sum), on the GPU in float32. It prints the loss and the greedy accuracy on the reading sentences
   (format learnt?) and on the held-out task (near chance: the sum is left to RL).
4. RL: `examples/start_rlvr_pipeline.py` with the demo config (examples/tiny_rlvr/rlvr_tiny.yaml: 32 prompts x 8
   samples, 6 new tokens, GRPO, PPO-clip 0.2, KL 0.001 to the warm start, 4 optimizer steps per generation) and
   these overrides: every role on GPU 0, bfloat16 on every role (actor_train: FSDP2, float32 master weights),
   learning rate --lr. The launcher's own validation gives the held-out accuracy before the first step and every
   --eval_steps steps; this script reads it from the launcher's log (`val/score/all`).
The learning rates are guesses scaled from the demo's (width 896 against 64, 24 layers against 2), not measured
on a GPU. --dry_run stops after writing the launcher's command and runs it with --dry_run (the config checks).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = dict(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864)
TINY = dict(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=256, dtype="float32", steps=4, eval_steps=2)
TINY.update(lr=1e-3, warm_start_steps=60, warm_start_lr=3e-3)  # the demo's own settings (DemoSettings, rlvr_tiny)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for key, value in SHAPE.items():
        p.add_argument(f"--{key}", type=int, default=value)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16", help="every role's model_args")
    p.add_argument("--steps", type=int, default=40, help="RL steps (max_steps)")
    p.add_argument("--eval_steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=3e-5, help="RL learning rate")
    p.add_argument("--warm_start_steps", type=int, default=300)
    p.add_argument("--warm_start_lr", type=float, default=1e-4)
    p.add_argument("--warm_start_batch", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strategy", default="fsdp2", choices=["fsdp2", "deepspeed_zero0"], help="actor_train")
    p.add_argument("--overrides", nargs="*", default=[], help="extra Hydra overrides for the launcher")
    p.add_argument("--work_dir", default=None, help="model, data and run folder (default: a temp dir)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds the launcher may take")
    p.add_argument("--dry_run", action="store_true", help="only the launcher's --dry_run (no model is built)")
    p.add_argument("--tiny", action="store_true", help="CPU-sized defaults: " + json.dumps(TINY))
    p.add_argument("--json", default=None, help="also write the figures to this file")
    if p.parse_args(argv).tiny:
        p.set_defaults(**TINY)
    return p.parse_args(argv)


def launcher_overrides(args, demo_dir: Path, model_dir: Path, output_dir: Path) -> list[str]:
    """The demo config's changes for this run (the launcher's Hydra overrides)."""
    strategy = {"fsdp2": ("fsdp2_train", "null"), "deepspeed_zero0": ("deepspeed_train", "${deepspeed_zero}")}
    name, strategy_config = strategy[args.strategy]
    roles = ("actor_train", "actor_infer", "reference")
    return [
        f"model_path={model_dir}",
        f"actor_train.data_args.file_name={demo_dir / 'train.jsonl'}",
        f"validation.data_args.file_name={demo_dir / 'heldout.jsonl'}",
        f"output_dir={output_dir}",
        f"seed={args.seed}",
        f"max_steps={args.steps}",
        f"eval_steps={args.eval_steps}",
        "save_steps=0",
        "track_with=stdout",
        f"actor_train.training_args.learning_rate={args.lr}",
        f"actor_train.strategy_args.strategy_name={name}",
        f"actor_train.strategy_args.strategy_config={strategy_config}",
        "num_gpus_per_node=1",
        *[f"{role}.device_mapping=[0]" for role in roles],
        *[f"{role}.model_args.dtype={args.dtype}" for role in roles],
        *args.overrides,
    ]


def launcher_command(args, demo_dir: Path, model_dir: Path, output_dir: Path, dry_run: bool = False) -> list[str]:
    command = [sys.executable, str(ROOT / "examples" / "start_rlvr_pipeline.py"), "--config_path"]
    command += [str(ROOT / "examples" / "tiny_rlvr"), "--config_name", "rlvr_tiny"]
    return command + (["--dry_run"] if dry_run else []) + launcher_overrides(args, demo_dir, model_dir, output_dir)


BEFORE = re.compile(r"validation before training: .*?val/score/all ([0-9.]+)")
STEP = re.compile(r"\[(\d+)/\d+\] .*? val ([0-9.]+)")


def accuracy_curve(log: str) -> dict[int, float]:
    """{step: held-out accuracy} from the launcher's log: step 0 = before training."""
    before = BEFORE.search(log)
    curve = {0: float(before.group(1))} if before else {}
    curve.update({int(m.group(1)): float(m.group(2)) for m in STEP.finditer(log)})
    return curve


def build_and_warm_start(args, work: Path, device: str) -> dict:
    """The demo's data, a random-init model of the shape, the demo's warm start on `device`; its figures."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from roll.demo import task as demo_task
    from roll.demo.rlvr import DemoSettings, greedy_eval, prepare_demo, warm_start_conversations
    from roll.demo.tiny_model import save_random_qwen2
    from roll.demo.warm_start import warm_start

    demo_dir, model_dir = work / "demo", work / "model"
    settings = DemoSettings(seed=args.seed, warm_start_steps=0)
    prepare_demo(demo_dir, settings, log=lambda *_: None)  # data + tokenizer (its tiny model is not used)
    tokenizer = AutoTokenizer.from_pretrained(demo_dir / "model")
    shape = {k: getattr(args, k) for k in SHAPE}
    _, parameters = save_random_qwen2(
        model_dir,
        tokenizer,
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_layers=shape["layers"],
        num_heads=shape["heads"],
        num_kv_heads=shape["kv_heads"],
        max_position_embeddings=256,
        seed=args.seed,
    )
    print(f"model: Qwen2 {shape}, {parameters / 1e9:.3f} B parameters, vocabulary {len(tokenizer)}", flush=True)
    train = demo_task.read_jsonl(demo_dir / "train.jsonl")
    heldout = demo_task.read_jsonl(demo_dir / "heldout.jsonl")
    started = time.perf_counter()
    losses = warm_start(
        str(model_dir),
        warm_start_conversations(settings, train),
        steps=args.warm_start_steps,
        batch_size=args.warm_start_batch,
        lr=args.warm_start_lr,
        seed=args.seed,
        log=lambda line: print("warm start" + line, flush=True),
        device=device,
    )
    seconds = time.perf_counter() - started
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(device)
    reading = greedy_eval(model, tokenizer, demo_task.reading_problems(), settings.eval_max_new_tokens)
    task = greedy_eval(model, tokenizer, heldout, settings.eval_max_new_tokens)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    tail = losses[-10:] or [float("nan")]
    figures = {
        "parameters": parameters,
        "vocabulary": len(tokenizer),
        "warm_start_seconds": seconds,
        "warm_start_loss_first": losses[0] if losses else None,
        "warm_start_loss_last": sum(tail) / len(tail),
        "reading_accuracy": reading["accuracy"],
        "reading_format_ok": reading["format_ok"],
        "heldout_after_warm_start": task["accuracy"],
        "heldout_answers_after_warm_start": task["answer_counts"],
    }
    print(
        f"warm start: {args.warm_start_steps} steps in {seconds:.1f} s, loss {figures['warm_start_loss_first']:.3f} -> "
        f"{figures['warm_start_loss_last']:.3f}; reading sentences {reading['accuracy']:.3f} correct "
        f"({reading['format_ok']:.3f} boxed); held-out task {task['accuracy']:.3f} ({task['answer_counts']})",
        flush=True,
    )
    return figures


def run(args) -> dict:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        demo_dir, model_dir, output_dir = work / "demo", work / "model", work / "run"
        if args.dry_run:
            done = subprocess.run(launcher_command(args, demo_dir, model_dir, output_dir, dry_run=True))
            return {"dry_run_exit": done.returncode}
        result = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "dtype": args.dtype}
        result.update(build_and_warm_start(args, work, device))
        command = launcher_command(args, demo_dir, model_dir, output_dir)
        print("RL: " + " ".join(command), flush=True)
        started = time.perf_counter()
        log_path = work / "launcher.log"
        with open(log_path, "w") as log:  # the launcher's lines, shown as they come and kept for the curve
            env = {**os.environ, "RAY_ADDRESS": "local"}  # a Ray of its own, not one this process may know of
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            watchdog = threading.Timer(args.timeout, process.kill)  # a hung run still ends, its log kept
            watchdog.start()
            try:
                for line in process.stdout:
                    sys.stdout.write(line)
                    log.write(line)
                process.wait()
            finally:
                watchdog.cancel()
                if process.poll() is None:
                    process.kill()
        result["rl_seconds"] = time.perf_counter() - started
        result["launcher_exit"] = process.returncode
        curve = accuracy_curve(log_path.read_text())
    result["heldout_curve"] = curve
    if process.returncode != 0 or 0 not in curve or len(curve) < 2:
        raise SystemExit(
            f"gpu_learn: the launcher exited with {process.returncode}; held-out accuracy read from its log: {curve}"
        )
    result["before"], result["after"] = curve[0], curve[max(curve)]
    print(
        f"held-out accuracy (greedy, {args.dtype}): {result['before']:.3f} before RL -> {result['after']:.3f} after "
        f"{max(curve)} steps; curve {curve}; RL {result['rl_seconds']:.0f} s incl. start-up"
    )
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.dry_run and result["dry_run_exit"]:
        raise SystemExit(result["dry_run_exit"])
    return result


if __name__ == "__main__":
    main()
