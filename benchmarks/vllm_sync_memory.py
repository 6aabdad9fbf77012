"""Memory of the vLLM rollout worker over many weight syncs: does it grow?

    python benchmarks/vllm_sync_memory.py --model_dir smollm2_data/model [--syncs 50] [--no_trim]

Runs the `vllm` strategy (vLLM-CPU, in-process engine) as the pipeline's actor_infer worker does, and
repeats what a pipeline step does to it: a weight update with new tensors (the model's own weights plus a
step-dependent offset, streamed from a fresh state dict as a collective receive delivers them), a check
that the engine computes with them (its checksum against the sent tensors'), and a short sampled
generation. Prints the process's resident memory (RSS) after the engine starts and after every sync,
and the growth from sync 2 to the last sync.
"""

import argparse
import time
from types import SimpleNamespace


def rss_gb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**20
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--syncs", type=int, default=50)
    parser.add_argument("--no_trim", action="store_true", help="skip the heap trim after each update (as before)")
    args = parser.parse_args()

    import torch
    from safetensors.torch import load_file

    from roll.configs.worker import GeneratingArgs, ModelArgs, StrategyArgs, WorkerConfig
    from roll.distributed.data_proto import DataProto
    from roll.strategies import vllm_infer
    from roll.strategies.vllm_infer import VLLMInferStrategy

    if args.no_trim:
        vllm_infer.release_free_heap = lambda: False

    config = WorkerConfig(
        name="actor_infer",
        model_args=ModelArgs(model_name_or_path=args.model_dir, dtype="float32"),
        device_mapping=[0],
        generating_args=GeneratingArgs(max_new_tokens=16, num_return_sequences=4),
        strategy_args=StrategyArgs("vllm", {"max_model_len": 128}),
    )
    strategy = VLLMInferStrategy(SimpleNamespace(worker_config=config, rank=0, world_size=1))
    strategy.initialize()
    base = load_file(f"{args.model_dir}/model.safetensors")
    prompts = torch.tensor([[1, 9690, 198, 2683, 314, 216, 34, 1232, 216, 35, 47]] * 2)
    batch = DataProto.from_dict(tensors={"prompts": prompts, "attention_mask": torch.ones_like(prompts)})
    settings = {"num_return_sequences": 4, "max_new_tokens": 16, "do_sample": True, "temperature": 1.0}
    settings.update(top_p=1.0, top_k=0)
    print(f"engine up: RSS {rss_gb():.2f} GB", flush=True)
    history = []
    for sync in range(1, args.syncs + 1):
        started = time.perf_counter()
        offset = 1e-4 * sync
        sent = {name: tensor + offset for name, tensor in base.items()}  # new tensors, as a receive gives
        expected = sum((t.double().sum() + (t.double() ** 2).sum()).item() for t in sent.values())
        strategy.load_weights(iter(sent.items()))
        del sent
        got = strategy.state_checksum()
        if abs(got - expected) > 1e-6 * abs(expected):
            raise SystemExit(f"sync {sync}: engine checksum {got} != sent {expected}")
        batch.meta_info.update(generation_config=settings, seed=sync)
        strategy.generate(batch, settings)
        history.append(rss_gb())
        print(f"sync {sync:3d}: RSS {history[-1]:.2f} GB ({time.perf_counter() - started:.1f} s)", flush=True)
    if len(history) >= 2:
        print(
            f"RSS after sync 1 {history[0]:.2f} GB, sync 2 {history[1]:.2f} GB, sync {len(history)} "
            f"{history[-1]:.2f} GB, max {max(history):.2f} GB; growth from sync 2 to the last: "
            f"{history[-1] - history[1]:+.2f} GB"
        )


if __name__ == "__main__":
    main()
