"""Offload/reload round trips of every train strategy on one GPU, in one child process (rank 0 of 1, NCCL):

    python -m tests.gpu.offload_child WORKDIR      # writes WORKDIR/results.json

Per scenario, after one real optimizer step: CUDA memory held by tensors before offload(), after it and after
reload(); then a second step. The same scenario without the round trip gives the reference second step and
final weights. Run by test_offload_gpu.py; a child process because the engines' process group and CUDA state
must not live in the pytest process that also drives Ray workers on the same GPU.
"""

import dataclasses
import gc
import json
import os
import socket
import sys
import traceback
from pathlib import Path

import torch

from tests.strategies import harness as h

LORA = dict(lora_target="all-linear", lora_rank=4, lora_alpha=8)
# name: (strategy, strategy_config, LoRA)
SCENARIOS = {
    "deepspeed_zero0": ("deepspeed_train", h.ds_config(0), False),
    "deepspeed_zero3": ("deepspeed_train", h.ds_config(3), False),
    "fsdp2": ("fsdp2_train", None, False),
    "megatron": ("megatron_train", {"use_distributed_optimizer": True}, False),
    "lora_fsdp2": ("fsdp2_train", None, True),
    "lora_deepspeed_zero0": ("deepspeed_train", h.ds_config(0), True),
}
ROWS = slice(0, 8)  # one rank's rows: micro 4 × accumulation 2


def _allocated() -> int:
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def run(name: str, model_dir: Path, batches, round_trip: bool) -> dict:
    from roll.strategies import create_strategy

    strategy_name, strategy_config, lora = SCENARIOS[name]
    config = h.make_worker_config(model_dir, strategy_name, strategy_config, 4, 2, world_size=1)
    if lora:
        config = dataclasses.replace(config, model_args=dataclasses.replace(config.model_args, **LORA))
    strategy = create_strategy(strategy_name, h.StandInWorker(config, 0, 1))
    torch.manual_seed(0)  # LoRA's adapter initialisation draws from the global RNG: both runs start equal
    strategy.initialize(total_steps=2)
    result = {"first": strategy.train_step(h.as_proto(batches[0], ROWS), h.loss_fn)}
    if round_trip:
        result["before"] = _allocated()
        strategy.offload()
        result["offloaded"] = _allocated()
        strategy.reload()
        result["reloaded"] = _allocated()
    result["second"] = strategy.train_step(h.as_proto(batches[1], ROWS), h.loss_fn)
    result["params"] = {n: t.detach().float().cpu() for n, t in strategy.named_hf_parameters()}
    del strategy
    gc.collect()
    torch.cuda.empty_cache()
    return result


def state_bytes(model_dir: Path, lora: bool) -> dict:
    """fp32 weights, and Adam's two moments of what trains: the least an offload must move off the GPU."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    weights = sum(p.numel() for p in model.parameters()) * 4
    if lora:  # rank × (in + out) per adapted linear layer of the decoder (the output head is not adapted)
        rank = LORA["lora_rank"]
        linear = [m for m in model.model.modules() if isinstance(m, torch.nn.Linear)]
        trained = sum(rank * (m.in_features + m.out_features) for m in linear) * 4
    else:
        trained = weights
    return {"weights": weights, "moments": 2 * trained}


def main(workdir: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    model_dir, data_file = h.prepare(workdir)
    batches = torch.load(data_file)
    results = {}
    for name, (strategy_name, _, lora) in SCENARIOS.items():
        if strategy_name == "megatron_train" and not _importable("megatron.core"):
            results[name] = {"skipped": "megatron-core is not importable"}
            continue
        try:
            plain, moved = run(name, model_dir, batches, False), run(name, model_dir, batches, True)
        except Exception:  # noqa: BLE001 — reported per scenario; the test names the failing one
            results[name] = {"error": traceback.format_exc()}
            print(f"scenario {name} failed:\n{results[name]['error']}", flush=True)
            continue
        results[name] = {
            **{k: moved[k] for k in ("before", "offloaded", "reloaded")},
            **state_bytes(model_dir, lora),
            "second_plain": plain["second"],
            "second_round_trip": moved["second"],
            "max_param_diff": max((moved["params"][n] - p).abs().max().item() for n, p in plain["params"].items()),
        }
        print(f"scenario {name}: {json.dumps({k: v for k, v in results[name].items() if 'second' not in k})}")
    (workdir / "results.json").write_text(json.dumps(results, indent=1))


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module.split(".")[0]) is not None and importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main(Path(sys.argv[1]))
