"""Training-strategy cost on CPU: step time and peak RSS of deepspeed_train (ZeRO-0/2/3) and fsdp2_train
relative to a plain single-process PyTorch loop, on the tiny demo-size model and on a ~50M model.

Setup (one run, printed as ratios):
  * models built in code, saved as HF folders: "tiny" (Qwen2, hidden 64, 2 layers, vocab 1000, 0.3M
    parameters) and "50M" (hidden 512, 12 layers, 8 heads, intermediate 2048, vocab 1000, ~51M);
  * one optimizer step = the production PPO loss (ActorWorker._policy_loss: clipped surrogate + KL loss +
    entropy) over a global batch of 8 rows × (32 prompt + 32 response tokens), float32, gradient
    checkpointing off, clipping at 1.0, AdamW;
  * plain PyTorch: 1 process, micro-batch 2 × accumulation 4. Strategies: 2 processes (gloo), each
    micro-batch 2 × accumulation 2 on its half of the batch — the same global batch, so the ratios
    include what data parallelism over 2 ranks gains on 2 cores as well as what each engine costs;
  * each strategy runs in fresh processes (a finished DeepSpeed engine does not give all its memory
    back, which would bias whatever runs next), the tiny model first, then the 50M one. Peak RSS is the
    kernel's VmHWM, reset before each model (/proc/self/clear_refs) after freed heap is returned
    (malloc_trim); "above base" subtracts the RSS at that point (imports done, nothing loaded), summed
    over ranks. Each rank loads the full HF
    checkpoint before sharding (as the strategies do), which sets the sharded engines' peak.
  * step time: median of the timed steps after warm-up steps; with 2 ranks, the slower rank.

    OMP_NUM_THREADS=1 python benchmarks/train_strategies.py [--steps_tiny 3] [--steps_50m 2] [--only fsdp2,...]

On a shared 2-core machine the absolute times move with other load; the ratios from one run are what
this reports. Keep OMP_NUM_THREADS=1 (2 threads on 2 busy cores are 10-40x slower).
"""

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GLOBAL_ROWS, PROMPT, RESPONSE, MICRO = 8, 32, 32, 2
DS = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
    "fp16": {"enabled": "auto"},
}
STRATEGIES = {  # name: (strategy_name, strategy_config, world size)
    "plain pytorch": (None, None, 1),
    "deepspeed ZeRO-0": ("deepspeed_train", {**DS, "zero_optimization": {"stage": 0}}, 2),
    "deepspeed ZeRO-2": ("deepspeed_train", {**DS, "zero_optimization": {"stage": 2}}, 2),
    "deepspeed ZeRO-3": ("deepspeed_train", {**DS, "zero_optimization": {"stage": 3}}, 2),
    "fsdp2": ("fsdp2_train", {"reshard_after_forward": True}, 2),
}
MODELS = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256),
    "50M": dict(hidden_size=512, num_hidden_layers=12, num_attention_heads=8, intermediate_size=2048),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps_tiny", type=int, default=3, help="timed steps on the tiny model (after 2 warm-up)")
    p.add_argument("--steps_50m", type=int, default=2, help="timed steps on the 50M model (after 1 warm-up)")
    p.add_argument("--only", default=None, help="comma-separated strategy names (default: all)")
    return p.parse_args(argv)


def loss_settings() -> dict:
    from roll.algorithms import PolicyLossConfig

    return {
        "temperature": 1.0,
        "policy_loss_mode": "vanilla",
        "loss_agg_mode": "seq-mean-token-mean",
        "policy_loss_config": PolicyLossConfig(
            clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0
        ),
        "use_kl_loss": True,
        "kl_loss_type": "low_var_kl",
        "kl_loss_coef": 0.05,
        "entropy_loss_coef": 0.01,
    }


def build_model(directory: Path, size: str) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=1000,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        num_key_value_heads=MODELS[size]["num_attention_heads"],
        **MODELS[size],
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    out = directory / size
    model.save_pretrained(out)
    return out


def make_batches(steps: int, vocab: int = 1000) -> list[dict]:
    from roll.utils.functional import compute_position_ids

    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(steps):
        prompt_mask = torch.ones(GLOBAL_ROWS, PROMPT, dtype=torch.long)
        response_len = torch.randint(1, RESPONSE + 1, (GLOBAL_ROWS,), generator=generator)
        response_mask = (torch.arange(RESPONSE) < response_len[:, None]).float()
        prompts = torch.randint(4, vocab, (GLOBAL_ROWS, PROMPT), generator=generator)
        responses = torch.randint(4, vocab, (GLOBAL_ROWS, RESPONSE), generator=generator) * response_mask.long()
        attention_mask = torch.cat([prompt_mask, response_mask.long()], dim=1)
        noise = lambda: torch.randn(GLOBAL_ROWS, RESPONSE, generator=generator)  # noqa: E731
        batches.append(
            {
                "prompts": prompts,
                "responses": responses,
                "input_ids": torch.cat([prompts, responses], dim=1),
                "attention_mask": attention_mask,
                "position_ids": compute_position_ids(attention_mask),
                "response_mask": response_mask,
                "old_log_probs": (-7.0 + 0.3 * noise()) * response_mask,
                "ref_log_probs": (-7.0 + 0.1 * noise()) * response_mask,
                "advantages": torch.randn(GLOBAL_ROWS, 1, generator=generator).expand(-1, RESPONSE) * response_mask,
            }
        )
    return batches


def rss_mb() -> tuple[float, float]:
    """(current VmRSS, peak VmHWM) of this process in MB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


@dataclass
class StandInWorker:  # what a strategy reads from its roll.distributed.worker.Worker
    worker_config: object
    rank: int
    world_size: int
    model_kind: str = "causal_lm"


def _worker_config(model_dir, strategy_name, strategy_config, world_size):
    from roll.configs.worker import ModelArgs, StrategyArgs, TrainingArgs, WorkerConfig

    accumulation = GLOBAL_ROWS // world_size // MICRO
    return WorkerConfig(
        name="actor_train",
        model_args=ModelArgs(model_name_or_path=str(model_dir), dtype="float32", disable_gradient_checkpointing=True),
        training_args=TrainingArgs(
            learning_rate=1e-5,
            per_device_train_batch_size=MICRO,
            gradient_accumulation_steps=accumulation,
            max_grad_norm=1.0,
        ),
        strategy_args=StrategyArgs(strategy_name=strategy_name or "plain", strategy_config=strategy_config),
        world_size=world_size,
    )


class PlainTrainer:
    """The reference loop: HF model, AdamW, loss / accumulation, clip, one step (no engine)."""

    def __init__(self, config):
        from transformers import AutoModelForCausalLM

        from roll.strategies.train_common import build_adamw, build_lr_scheduler

        self.config = config
        self.model = AutoModelForCausalLM.from_pretrained(config.model_args.model_name_or_path, dtype=torch.float32)
        self.model.train()
        self.optimizer = build_adamw(self.model.parameters(), config.training_args)
        self.scheduler = build_lr_scheduler(self.optimizer, config.training_args, 0)

    def train_step(self, batch, loss_fn):
        from roll.strategies.train_common import forward_inputs, split_train_batch

        micros = split_train_batch(self.config, batch)
        for micro in micros:
            loss, _ = loss_fn(micro, self.model(**forward_inputs(micro, "cpu"), use_cache=False).logits)
            (loss / len(micros)).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.training_args.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)


def _release_and_reset_peak_rss() -> float:
    """Give freed heap back to the kernel (glibc malloc_trim), then reset VmHWM to the current RSS (Linux:
    5 > /proc/self/clear_refs), so one process can measure the peak of several runs in turn without the
    previous run's freed-but-kept pages hiding the next run's growth. Returns the RSS it starts from."""
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    return rss_mb()[0]


def _rank_main(rank, world_size, port, names, model_dirs, steps, out_dir):
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    torch.set_num_threads(1)
    import gc
    import warnings

    import transformers

    warnings.filterwarnings("ignore", category=FutureWarning)
    transformers.utils.logging.disable_progress_bar()
    from roll.distributed.data_proto import DataProto
    from roll.strategies import create_strategy
    from roll.workers.actor_worker import ActorWorker

    if world_size > 1:  # every import before the first measurement: init times are the engines' own
        from importlib import import_module

        for module in (
            "deepspeed",
            "torch.distributed.fsdp",
            "torch.distributed.checkpoint",
            "roll.strategies.deepspeed_train",
            "roll.strategies.fsdp2_train",
        ):
            import_module(module)

        torch.distributed.init_process_group("gloo")
    settings = loss_settings()
    results = {}
    for name in names:
        strategy_name, strategy_config, _ = STRATEGIES[name]
        results[name] = {}
        for size, model_dir in model_dirs.items():
            warmup, timed = (2, steps["tiny"]) if size == "tiny" else (1, steps["50M"])
            batches = make_batches(warmup + timed)
            base_rss = _release_and_reset_peak_rss()
            config = _worker_config(model_dir, strategy_name, strategy_config, world_size)
            started = time.perf_counter()
            if strategy_name is None:
                trainer = PlainTrainer(config)
            else:
                trainer = create_strategy(strategy_name, StandInWorker(config, rank, world_size))
                trainer.initialize(total_steps=0)
            init_seconds = time.perf_counter() - started
            rows = GLOBAL_ROWS // world_size
            times = []
            for index, tensors in enumerate(batches):
                own = {k: v[rank * rows : (rank + 1) * rows] for k, v in tensors.items()}
                batch = DataProto.from_dict(tensors=own, meta_info={"loss": settings})
                if world_size > 1:
                    torch.distributed.barrier()
                started = time.perf_counter()
                trainer.train_step(batch, lambda micro, logits: ActorWorker._policy_loss(None, micro, logits))
                if index >= warmup:
                    times.append(time.perf_counter() - started)
            _, peak_rss = rss_mb()
            module = trainer.model if strategy_name is None else trainer.module
            results[name][size] = {
                "step": statistics.median(times),
                "init": init_seconds,
                "peak_rss": peak_rss,
                "base_rss": base_rss,
                "params": sum(p.numel() for p in module.parameters()),
            }
            if strategy_name == "deepspeed_train":
                trainer.model.destroy()
            del trainer, module, batches
            gc.collect()
            if world_size > 1:
                torch.distributed.barrier()
            if rank == 0:
                print(f"    {name} / {size}: {results[name][size]['step']:.3f} s/step", flush=True)
    (Path(out_dir) / f"{rank}.json").write_text(json.dumps(results))
    if world_size > 1:
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_group(names: list, world_size: int, model_dirs: dict, steps: dict, workdir: Path) -> dict:
    """All `names` one after the other in one set of `world_size` fresh processes."""
    import torch.multiprocessing as mp

    out_dir = Path(tempfile.mkdtemp(dir=workdir))
    mp.start_processes(
        _rank_main,
        args=(world_size, _free_port(), names, {k: str(v) for k, v in model_dirs.items()}, steps, str(out_dir)),
        nprocs=world_size,
        start_method="spawn",
    )
    per_rank = [json.loads((out_dir / f"{rank}.json").read_text()) for rank in range(world_size)]
    return {
        name: {
            size: {
                "step": max(r[name][size]["step"] for r in per_rank),
                "init": max(r[name][size]["init"] for r in per_rank),
                "rank_peak": max(r[name][size]["peak_rss"] for r in per_rank),
                "total_peak": sum(r[name][size]["peak_rss"] for r in per_rank),
                "above_base": sum(r[name][size]["peak_rss"] - r[name][size]["base_rss"] for r in per_rank),
                "params": per_rank[0][name][size]["params"],
            }
            for size in model_dirs
        }
        for name in names
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    names = (
        list(STRATEGIES)
        if args.only is None
        else ["plain pytorch"] + [n for n in args.only.split(",") if n != "plain pytorch"]
    )
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        model_dirs = {size: build_model(workdir, size) for size in MODELS}
        steps = {"tiny": args.steps_tiny, "50M": args.steps_50m}
        results = {}
        for name in names:  # fresh processes per strategy: a finished engine's memory is not always freed
            t0 = time.time()
            world_size = STRATEGIES[name][2]
            results.update(run_group([name], world_size, model_dirs, steps, workdir))
            print(
                f"  ran {name} ({world_size} process{'es' if world_size > 1 else ''}) in {time.time() - t0:.0f} s",
                flush=True,
            )
    plain = results["plain pytorch"]
    print(
        f"\nglobal batch {GLOBAL_ROWS} rows × {PROMPT + RESPONSE} tokens, float32, OMP_NUM_THREADS=1; plain: "
        f"1 process, strategies: 2 gloo ranks. Ratios are relative to plain PyTorch (lower is better)."
    )
    for size in MODELS:
        print(
            f"\n{size} model ({plain[size]['params'] / 1e6:.2f}M parameters); plain PyTorch: step "
            f"{plain[size]['step']:.3f} s, peak RSS {plain[size]['total_peak']:.0f} MB "
            f"({plain[size]['above_base']:.0f} MB above base)"
        )
        print(
            f"  {'strategy':<18}{'step s':>8}{'step ×':>8}{'init s':>8}{'rank peak MB':>14}{'rank ×':>8}"
            f"{'all ranks MB':>14}{'all ×':>7}{'above base MB':>15}{'above ×':>9}"
        )
        for name, result in results.items():
            r, p = result[size], plain[size]
            print(
                f"  {name:<18}{r['step']:>8.3f}{r['step'] / p['step']:>8.2f}{r['init']:>8.2f}"
                f"{r['rank_peak']:>14.0f}{r['rank_peak'] / p['rank_peak']:>8.2f}{r['total_peak']:>14.0f}"
                f"{r['total_peak'] / p['total_peak']:>7.2f}{r['above_base']:>15.0f}"
                f"{r['above_base'] / max(p['above_base'], 1):>9.2f}"
            )
    print(f"\ntotal {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
