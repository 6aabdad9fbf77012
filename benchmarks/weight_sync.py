"""Weight-sync time per MB of each transport, measured in one run on the same two roles.

    OMP_NUM_THREADS=1 python benchmarks/weight_sync.py [--hidden 512] [--layers 4] [--buffer_mb 16] [--repeats 3]

actor_train (deepspeed_train, ZeRO-0) and actor_infer (hf_infer) run as Ray workers on one virtual device
each; the same workers sync through `object_store`, `collective` (gloo broadcast), `ipc` (/dev/shm) and,
for reference, the former path (the whole state dict from trainer rank 0 through the driver, one Ray put).
Reported: the median over --repeats of the transfer time (verification excluded) divided by the size.
Absolute numbers depend on the machine's load; the ratios are the point.

    OMP_NUM_THREADS=1 python benchmarks/weight_sync.py --lora_rank 8 [--hidden 512] [--layers 4] [--repeats 3]

Verification policies (weight_sync_check, weight_sync_full_check_steps), on the same roles after the
transports (alone with --policies_only): the wall time of a sync under `off` (transfer only), `checksum`
and `full` (checksums + probe generation + probe log-probs under both roles), median over --repeats; the
cost of each policy per step is its time over `off`'s, printed with its ratio to `full`'s cost and to the
transfer's. The ratios do not carry over to a GPU (there the checksums are bandwidth-bound reductions and
the probe is latency-bound generation): docs/strategies.md has the GPU estimate.

LoRA: actor_train trains rank-R adapters on every linear layer (deepspeed_train ZeRO-0 + peft) and
actor_infer is vllm with enable_lora; per transport, the bytes and the median transfer time of one sync of
the merged weights (lora_weight_sync: merged) and of the adapter alone (lora_weight_sync: adapter), both
verified by the pipeline's checksum + probe check.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def build_roles(model_dir: Path, buffer_mb: float, lora_rank: int = 0):
    import yaml

    from roll.configs.worker import GeneratingArgs, ModelArgs, StrategyArgs, TrainingArgs, WorkerConfig
    from roll.distributed.cluster import Cluster
    from roll.distributed.resource_manager import ResourceManager
    from roll.workers.actor_worker import ActorWorker

    zero = yaml.safe_load((Path(__file__).parents[1] / "roll/configs/blocks/deepspeed_zero.yaml").read_text())
    model = ModelArgs(model_name_or_path=str(model_dir), dtype="float32")
    lora = dict(lora_target="all-linear", lora_rank=lora_rank, lora_alpha=2 * lora_rank) if lora_rank else {}
    train = WorkerConfig(
        name="actor_train",
        model_args=ModelArgs(model_name_or_path=str(model_dir), dtype="float32", **lora),
        device_mapping=[0],
        training_args=TrainingArgs(per_device_train_batch_size=1),
        strategy_args=StrategyArgs("deepspeed_train", zero["deepspeed_zero"]),
    )
    infer = WorkerConfig(
        name="actor_infer",
        model_args=model,
        device_mapping=[1],
        generating_args=GeneratingArgs(max_new_tokens=4, num_return_sequences=1),
        strategy_args=StrategyArgs("hf_infer"),
    )
    if lora_rank:
        engine = {"max_model_len": 64, "enable_lora": True, "max_lora_rank": max(8, lora_rank)}
        infer.strategy_args = StrategyArgs("vllm", engine)
    manager = ResourceManager(num_nodes=1, num_gpus_per_node=2)
    clusters = [Cluster(c.name, ActorWorker, manager, c, seed=0) for c in (train, infer)]
    for call in [cluster.initialize.submit(total_steps=1) for cluster in clusters]:
        call.result()
    return manager, clusters


def probe(model_dir: Path):
    from roll.data.prompts import collate_prompts

    row = {"prompt_ids": [5, 6, 7, 8], "prompt_text": "", "ground_truth": "", "tag": None}
    return collate_prompts([row], 8, 0)


def legacy_sync(actor_train, actor_infer) -> float:
    """The path this replaced: full state dict on rank 0 → driver → one object → every engine worker."""
    import ray

    started = time.perf_counter()
    weights = next(w for w in actor_train.get_weights() if w)
    actor_infer.load_weights(ray.put(weights))
    return time.perf_counter() - started


def lora_main(args) -> None:
    """Merged vs adapter-only sync of a LoRA actor_train into vllm, per transport: bytes and seconds."""
    import ray

    from roll.demo.tiny_model import build_tiny_model
    from roll.distributed.ray_utils import init_ray
    from roll.pipeline.core.weight_sync import WeightSync

    words = [f"w{i}" for i in range(900)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(
            str(Path(tmp) / "model"),
            words,
            hidden_size=args.hidden,
            num_layers=args.layers,
            num_heads=args.hidden // 64,
        )
        init_ray(num_devices=2)
        manager, (actor_train, actor_infer) = build_roles(model_dir, args.buffer_mb, args.lora_rank)
        try:
            for method in ("object_store", "collective", "ipc"):
                for adapter_only in (False, True):
                    sync = WeightSync(
                        actor_train,
                        actor_infer,
                        probe(model_dir),
                        buffer_size_mb=args.buffer_mb,
                        method=method,
                        adapter_only=adapter_only,
                    )
                    runs = [sync.sync_and_verify(step) for step in range(args.repeats + 1)][1:]  # first: warm-up
                    row = (
                        method,
                        "adapter" if adapter_only else "merged",
                        runs[0]["weight_sync/size_mb"],
                        statistics.median(r["weight_sync/seconds"] for r in runs),
                        max(r["weight_sync/probe_max_abs_diff"] for r in runs),
                    )
                    rows.append(row)
                    print(f"{row[0]:<13} {row[1]:<8} {row[2]:9.3f} MB  {row[3] * 1e3:8.1f} ms", flush=True)
        finally:
            for cluster in (actor_train, actor_infer):
                cluster.shutdown()
            manager.shutdown()
            ray.shutdown()
    print(
        f"\nLoRA rank {args.lora_rank} on every linear layer, hidden {args.hidden}, {args.layers} layers; "
        "vllm actor_infer"
    )
    print(f"{'transport':<13} {'sync':<8} {'MB per sync':>11} {'ms (median)':>12} {'probe max |Δ|':>14}")
    for method, kind, size, seconds, probe_diff in rows:
        print(f"{method:<13} {kind:<8} {size:11.3f} {seconds * 1e3:12.1f} {probe_diff:14.2g}")


def policy_costs(actor_train, actor_infer, model_dir: Path, args) -> None:
    """Seconds per sync of each verification policy, and what each costs per step relative to `full`."""
    from roll.pipeline.core.weight_sync import WeightSync

    seconds = {}
    for check in ("off", "checksum", "full"):
        sync = WeightSync(actor_train, actor_infer, probe(model_dir), buffer_size_mb=args.buffer_mb, check=check)
        sync.sync_and_verify(-1, initial=True)  # warm-up (and the start-up full check every policy runs)
        times = []
        for step in range(args.repeats):
            started = time.perf_counter()
            assert sync.sync_and_verify(step)["weight_sync/checked"] == {"off": 0, "checksum": 1, "full": 2}[check]
            times.append(time.perf_counter() - started)
        seconds[check] = statistics.median(times)
        print(f"{check:<9} {seconds[check] * 1e3:8.1f} ms per sync", flush=True)
    full_cost = seconds["full"] - seconds["off"]
    policies = {  # label: verification seconds per step (over the transfer alone)
        "off": 0.0,
        "checksum (default)": seconds["checksum"] - seconds["off"],
        "checksum + full every 10": (9 * seconds["checksum"] + seconds["full"]) / 10 - seconds["off"],
        "checksum + full every 50": (49 * seconds["checksum"] + seconds["full"]) / 50 - seconds["off"],
        "full every step": full_cost,
    }
    print(f"\nverification cost per step (median of {args.repeats}; transfer alone: {seconds['off'] * 1e3:.1f} ms)")
    print(f"{'policy':<26} {'ms/step':>8} {'vs full':>8} {'vs transfer':>12}")
    for label, cost in policies.items():
        ratio = cost / full_cost if full_cost > 0 else float("nan")
        print(f"{label:<26} {cost * 1e3:8.1f} {ratio:8.3f} {cost / seconds['off']:12.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--buffer_mb", type=float, default=16.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lora_rank", type=int, default=0, help="> 0: LoRA merged vs adapter-only sync into vllm")
    parser.add_argument("--policies_only", action="store_true", help="only the verification policies' costs")
    args = parser.parse_args()
    if args.lora_rank:
        lora_main(args)
        return

    import ray

    from roll.demo.tiny_model import build_tiny_model
    from roll.distributed.ray_utils import init_ray
    from roll.pipeline.core.weight_sync import WeightSync

    words = [f"w{i}" for i in range(900)]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(
            str(Path(tmp) / "model"),
            words,
            hidden_size=args.hidden,
            num_layers=args.layers,
            num_heads=args.hidden // 64,
        )
        init_ray(num_devices=2)
        manager, (actor_train, actor_infer) = build_roles(model_dir, args.buffer_mb)
        per_mb, size_mb = {}, 0.0
        try:
            policy_costs(actor_train, actor_infer, model_dir, args)
            if args.policies_only:
                return
            for method in ("object_store", "collective", "ipc"):
                sync = WeightSync(
                    actor_train, actor_infer, probe(model_dir), buffer_size_mb=args.buffer_mb, method=method
                )
                runs = [sync.sync_and_verify(step) for step in range(args.repeats + 1)][1:]  # first: warm-up
                size_mb = runs[0]["weight_sync/size_mb"]
                per_mb[method] = statistics.median(r["weight_sync/seconds"] for r in runs) / size_mb
                print(f"{method:<13} {len(sync.last_buckets)} buckets  {per_mb[method] * 1e3:7.2f} ms/MB", flush=True)
            legacy_sync(actor_train, actor_infer)
            per_mb["legacy"] = (
                statistics.median(legacy_sync(actor_train, actor_infer) for _ in range(args.repeats)) / size_mb
            )
        finally:
            for cluster in (actor_train, actor_infer):
                cluster.shutdown()
            manager.shutdown()
            ray.shutdown()
    base = per_mb["object_store"]
    print(f"\nmodel {size_mb:.1f} MB, buckets of <= {args.buffer_mb:g} MB, median of {args.repeats}")
    print(f"{'path':<36} {'ms/MB':>8} {'vs object_store':>16}")
    labels = {
        "object_store": "object_store (bucketed)",
        "collective": "collective (gloo broadcast)",
        "ipc": "ipc (/dev/shm)",
        "legacy": "former: whole state dict via driver",
    }
    for method, value in per_mb.items():
        print(f"{labels[method]:<36} {value * 1e3:8.2f} {value / base:15.2f}x")


if __name__ == "__main__":
    main()
