"""Cost of an RLVR step at a real model size: seconds per step and per phase, device utilisation, peak memory,
rollout and training tokens per second.

    python benchmarks/gpu_scale.py [--steps 3] [--dtype float32|bfloat16] [--strategy fsdp2|deepspeed_zero0|...]
        [--hidden 896 --layers 24 --heads 14 --kv_heads 2 --intermediate 4864]
        [--prompts 32 --group 8 --response_length 128 --train_batch 64] [--json FILE]
    python benchmarks/gpu_scale.py --tiny            # CPU: hidden 64, 2 layers, 1 step (what CI runs)

The default shape is Qwen2-0.5B's body (0.36 B parameters with the demo's small vocabulary), randomly
initialised and saved locally with the demo's tokenizer and data (no hub). The demo config runs with every role
on device 0 (`num_gpus_per_node=1`, all `device_mapping=[0]`), so each step also pays the colocation switches
and the weight sync with its verification. Utilisation and memory are sampled every 0.5 s from nvidia-smi (all
processes on the GPU: the Ray workers hold the memory, not this driver); on CPU the machine's CPU load and used
RAM instead. Random weights generate until response_length, so every sample is full length.
"""

import argparse
import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STRATEGIES = {  # name: (strategy_name, strategy_config override)
    "fsdp2": ("fsdp2_train", "null"),
    "deepspeed_zero0": ("deepspeed_train", "${deepspeed_zero}"),
    "deepspeed_zero3": ("deepspeed_train", "${deepspeed_zero3}"),
    "megatron": ("megatron_train", "null"),
}
TINY = dict(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=256, steps=1, prompts=4, group=2, response_length=8)
TINY["train_batch"] = 8


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--heads", type=int, default=14)
    parser.add_argument("--kv_heads", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=4864)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--strategy", choices=list(STRATEGIES), default="fsdp2")
    parser.add_argument("--prompts", type=int, default=32, help="rollout_batch_size")
    parser.add_argument("--group", type=int, default=8, help="num_return_sequences_in_group")
    parser.add_argument("--response_length", type=int, default=128)
    parser.add_argument("--train_batch", type=int, default=64, help="per_device_train_batch_size")
    parser.add_argument("--tiny", action="store_true", help="defaults for a CPU-sized run: " + json.dumps(TINY))
    parser.add_argument("--output_dir", default=None, help="keep the model and the run here (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    if parser.parse_args(argv).tiny:  # the tiny shape's values, unless given on the command line
        parser.set_defaults(**TINY)
    return parser.parse_args(argv)


class Sampler(threading.Thread):
    """Device utilisation (%) and used memory (MiB) every `interval` s: every GPU through nvidia-smi, else the
    machine's CPU load and used RAM (psutil, which Ray brings)."""

    def __init__(self, gpu: bool, interval: float = 0.5):
        super().__init__(daemon=True)
        self.gpu, self.interval = gpu, interval
        self.samples: list[tuple[float, float, float]] = []  # (time, utilisation %, MiB used)
        self.stopped = threading.Event()

    def read(self) -> tuple[float, float]:
        if self.gpu:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
            rows = [[float(x) for x in line.split(",")] for line in out.strip().splitlines()]
            return max(r[0] for r in rows), sum(r[1] for r in rows)
        import psutil

        return psutil.cpu_percent(), psutil.virtual_memory().used / 2**20

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.samples.append((time.perf_counter(), *self.read()))

    def between(self, start: float, end: float) -> list[tuple[float, float, float]]:
        return [s for s in self.samples if start <= s[0] <= end]


def build_model(args, demo_dir: Path, out: Path) -> int:
    """A random-init Qwen2 of the requested shape with the demo's tokenizer; returns its parameter count."""
    import torch
    from transformers import AutoTokenizer

    from roll.demo.tiny_model import save_random_qwen2

    tokenizer = AutoTokenizer.from_pretrained(demo_dir / "model")
    _, parameters = save_random_qwen2(
        out,
        tokenizer,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_layers=args.layers,
        num_heads=args.heads,
        num_kv_heads=args.kv_heads,
        max_position_embeddings=512,
        dtype=getattr(torch, args.dtype),
    )
    return parameters


def overrides(args, demo_dir: Path, model_dir: Path, output_dir: Path) -> list[str]:
    strategy, strategy_config = STRATEGIES[args.strategy]
    roles = ("actor_train", "actor_infer", "reference")
    rows = args.prompts * args.group
    return [
        f"model_path={model_dir}",
        f"actor_train.data_args.file_name={demo_dir / 'train.jsonl'}",
        f"validation.data_args.file_name={demo_dir / 'heldout.jsonl'}",
        f"output_dir={output_dir}",
        f"max_steps={args.steps}",
        "eval_steps=0",
        "save_steps=0",
        "track_with=stdout",
        f"rollout_batch_size={args.prompts}",
        f"num_return_sequences_in_group={args.group}",
        f"response_length={args.response_length}",
        f"actor_train.training_args.per_device_train_batch_size={args.train_batch}",
        f"actor_train.infer_batch_size={min(rows, 64)}",
        f"reference.infer_batch_size={min(rows, 64)}",
        f"actor_infer.infer_batch_size={rows}",
        f"actor_train.strategy_args.strategy_name={strategy}",
        f"actor_train.strategy_args.strategy_config={strategy_config}",
        "num_gpus_per_node=1",
        *[f"{role}.device_mapping=[0]" for role in roles],
        *[f"{role}.model_args.dtype={args.dtype}" for role in roles],
    ]


def token_counter():
    from roll.pipeline.core.callbacks import StepCallback

    class TokenCounter(StepCallback):
        """Per step: generated tokens (response_mask) and trained tokens (attention_mask: prompt + response)."""

        def __init__(self):
            self.steps: dict[int, dict] = {}

        def on_step_end(self, step, batch, metrics):
            self.steps[step] = {
                "response_tokens": int(batch.batch["response_mask"].sum().item()),
                "train_tokens": int(batch.batch["attention_mask"].sum().item()),
                "end": time.perf_counter(),
            }

    return TokenCounter()


def summarise(history: dict, counter, sampler: Sampler, params: int, args, gpu: bool) -> dict:
    from roll.pipeline.core.profiling import phase_seconds

    steps = []
    for step, metrics in sorted(history["steps"].items()):
        tokens = counter.steps[step]
        window = sampler.between(tokens["end"] - metrics["timing/step"], tokens["end"])
        phases = {key.removeprefix("timing/"): value for key, value in phase_seconds(metrics).items()}
        steps.append(
            {
                "step": step + 1,
                "seconds": metrics["timing/step"],
                "phases": phases,
                "overlap": metrics.get("timing/overlap", 0.0),  # seconds phases ran at once (they sum to more)
                "utilisation_mean": statistics.fmean(s[1] for s in window) if window else None,
                "rollout_tokens_per_s": tokens["response_tokens"] / phases["generate"],
                "train_tokens_per_s": tokens["train_tokens"] / phases["train"],
                **tokens,
            }
        )
    timed = steps[1:] or steps  # the first step pays one-off warm-ups (kernels, allocator)
    return {
        "device": "gpu" if gpu else "cpu",
        "parameters": params,
        "shape": {k: getattr(args, k) for k in ("hidden", "layers", "heads", "kv_heads", "intermediate")},
        "dtype": args.dtype,
        "strategy": args.strategy,
        "samples_per_step": args.prompts * args.group,
        "steps": steps,
        "seconds_per_step": statistics.fmean(s["seconds"] for s in timed),
        "phases_mean": {k: statistics.fmean(s["phases"][k] for s in timed) for k in timed[0]["phases"]},
        "utilisation_mean": statistics.fmean(s[1] for s in sampler.samples) if sampler.samples else None,
        "utilisation_max": max((s[1] for s in sampler.samples), default=None),
        "peak_memory_mib": max((s[2] for s in sampler.samples), default=None),
        "rollout_tokens_per_s": statistics.fmean(s["rollout_tokens_per_s"] for s in timed),
        "train_tokens_per_s": statistics.fmean(s["train_tokens_per_s"] for s in timed),
    }


def report(result: dict) -> None:
    unit = "GPU" if result["device"] == "gpu" else "CPU load"
    memory = "GPU memory used (all processes)" if result["device"] == "gpu" else "RAM used (whole machine)"
    print(
        f"model: Qwen2 {result['shape']}, {result['parameters'] / 1e9:.3f} B parameters, {result['dtype']}, "
        f"actor_train on {result['strategy']}, {result['samples_per_step']} samples per step, on {result['device']}"
    )
    for s in result["steps"]:
        phases = " ".join(f"{k} {v:.2f}" for k, v in s["phases"].items())
        util = f"{s['utilisation_mean']:.0f}%" if s["utilisation_mean"] is not None else "n/a"
        print(f"step {s['step']}: {s['seconds']:.2f} s ({phases}) | {unit} {util}")
    print(f"seconds per step (steps after the first where there are several): {result['seconds_per_step']:.2f}")
    print("phases (mean s): " + " ".join(f"{k} {v:.2f}" for k, v in result["phases_mean"].items()))
    if result["utilisation_mean"] is not None:
        print(f"{unit} utilisation: mean {result['utilisation_mean']:.0f}%, max {result['utilisation_max']:.0f}%")
        print(f"peak {memory}: {result['peak_memory_mib']:.0f} MiB")
    print(f"rollout tokens/s (generated / generate phase): {result['rollout_tokens_per_s']:,.0f}")
    print(f"training tokens/s (prompt + response / train phase): {result['train_tokens_per_s']:,.0f}")


def run(args) -> dict:
    import torch

    from roll.configs import compose_config
    from roll.demo.rlvr import DemoSettings, prepare_demo
    from roll.pipeline.rlvr.config import load_rlvr_config
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    gpu = torch.cuda.is_available()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.output_dir or tmp)
        demo_dir = root / "demo"
        prepare_demo(demo_dir, DemoSettings(warm_start_steps=0), log=lambda *_: None)  # tokenizer + data only
        started = time.perf_counter()
        params = build_model(args, demo_dir, root / "model")
        print(f"built the model in {time.perf_counter() - started:.1f} s", flush=True)
        config = load_rlvr_config(
            compose_config(
                str(REPO / "examples" / "tiny_rlvr"),
                "rlvr_tiny",
                overrides(args, demo_dir, root / "model", root / "run"),
            )
        )
        counter, sampler = token_counter(), Sampler(gpu)
        sampler.start()
        try:
            with RLVRPipeline(config, callbacks=[counter]) as pipeline:
                history = pipeline.run()
        finally:
            sampler.stopped.set()
            sampler.join(timeout=15)
    return summarise(history, counter, sampler, params, args, gpu)


def main(argv=None) -> dict:
    args = parse_args(argv)
    result = run(args)
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
