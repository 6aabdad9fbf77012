"""2-rank (gloo) runner for the megatron strategy tests: harness.run_scenario per scenario, megatron's
parallel state torn down between scenarios (each one may use another TP/PP layout), plus a `logits`
scenario that compares the converted GPTModel's logits with HF's."""

import os
import time
import traceback
from pathlib import Path

import torch

from tests.strategies import harness as h

REASON = (
    "megatron-core==0.16.1 is not installed (the `megatron` extra: pip install -e '.[megatron]'; "
    "scripts/install.sh test installs it)"
)


def megatron_available() -> bool:
    try:
        import megatron.core  # noqa: F401
    except ImportError:
        return False
    return True


def launch(
    scenarios: list[dict], model_dir: Path, data_file: Path, workdir: Path, timeout: float = 900, world_size: int = 0
) -> dict:
    """`world_size` ranks (default harness.WORLD_SIZE) run `scenarios`; rank 0 writes the results."""
    import torch.multiprocessing as mp

    port = h._free_port()
    world_size = world_size or h.WORLD_SIZE
    context = mp.start_processes(
        _rank_main,
        args=(port, scenarios, str(model_dir), str(data_file), str(workdir), world_size),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + timeout
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            raise TimeoutError(f"megatron scenarios did not finish within {timeout} s")
    return torch.load(workdir / "megatron-results.pt", weights_only=False)


def _rank_main(rank, port, scenarios, model_dir, data_file, workdir, world_size) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    torch.set_num_threads(1)
    import warnings

    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo")
    from megatron.core import parallel_state

    batches = torch.load(data_file)
    results = {}
    for scenario in scenarios:
        started = time.monotonic()
        try:
            if scenario.get("logits"):
                result = run_logits(scenario, rank)
            elif scenario.get("runner"):  # another test module's scenario (e.g. megatron_lora_scenarios.run)
                result = h._runner(scenario["runner"])(scenario, rank, Path(model_dir), batches, Path(workdir))
            elif scenario.get("sum_pi_squared"):
                result = run_sum_pi_squared(scenario, rank, Path(model_dir), batches)
            else:
                result = h.run_scenario(scenario, rank, Path(model_dir), batches, Path(workdir))
        except Exception:  # noqa: BLE001
            print(f"[rank {rank}] scenario {scenario['name']} failed:\n{traceback.format_exc()}", flush=True)
            raise
        finally:
            parallel_state.destroy_model_parallel()
        result["seconds"] = time.monotonic() - started
        results[scenario["name"]] = result
        if rank == 0:
            print(f"scenario {scenario['name']}: {result['seconds']:.1f} s", flush=True)
    if rank == 0:
        torch.save(results, Path(workdir) / "megatron-results.pt")
    dist.barrier()
    dist.destroy_process_group()


def run_sum_pi_squared(scenario: dict, rank: int, model_dir: Path, batches) -> dict:
    """Σπ² (the optimal-token-baseline weights) from megatron_infer on rows 0-9, dispatched and collected as
    the Cluster does (harness.uneven_scoring_batch: with PP2 on 2 ranks one group holds all 10 rows, whose
    last micro-batch of infer_batch_size=3 is padded for the pipeline's fixed shapes)."""
    from roll.strategies import create_strategy

    world = torch.distributed.get_world_size()
    config = h.make_worker_config(model_dir, "megatron_infer", scenario["config"], 1, 1, world)
    strategy = create_strategy("megatron_infer", h.StandInWorker(config, rank, world))
    strategy.initialize()
    layout = h.dp_layout(strategy, world)
    scores = strategy.compute_sum_pi_squared(h.uneven_scoring_batch(batches[0], layout, rank))
    return {"sum_pi_squared": h.collected(scores, layout)}


FUSED_FUNCTIONS = (  # megatron-core 0.16.1's plain-torch fusions: (module, function) called when the flag is on
    ("megatron.core.fusions.fused_bias_swiglu", "swiglu"),  # bias_activation_fusion, forward (no MLP bias)
    ("megatron.core.fusions.fused_bias_swiglu", "swiglu_back"),  # its hand-written backward
    ("megatron.core.fusions.fused_bias_dropout", "bias_dropout_add_fused_train"),  # bias_dropout_fusion
)


def run_counting_fused_calls(scenario: dict, rank: int, model_dir: Path, batches, workdir: Path) -> dict:
    """harness.run_scenario with FUSED_FUNCTIONS counted (result["fused_calls"]): proof that a fusion flag
    reached megatron's layers, not only the config."""
    import importlib

    counts, originals = dict.fromkeys((name for _, name in FUSED_FUNCTIONS), 0), []

    def counting(name, function):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return wrapper

    for module_name, name in FUSED_FUNCTIONS:
        module = importlib.import_module(module_name)
        originals.append((module, name, getattr(module, name)))
        setattr(module, name, counting(name, getattr(module, name)))
    try:
        result = h.run_scenario(scenario, rank, model_dir, batches, workdir)
    finally:
        for module, name, function in originals:
            setattr(module, name, function)
    return {**result, "fused_calls": counts}


def run_logits(scenario: dict, rank: int) -> dict:
    """HF checkpoint → roll's converter → GPTModel at TP = scenario['tp'] and EP = scenario.get('ep', 1) (this
    rank's shards and experts) → full-vocab logits of a left-padded batch; rank 0 returns them with HF's. With
    scenario['sp'], sequence parallelism on a batch of 13 columns, right-padded to a multiple of TP as megatron_train
    does."""
    from megatron.core import parallel_state as ps
    from transformers import AutoModelForCausalLM

    from roll.strategies.megatron import convert
    from roll.strategies.megatron import model as mm
    from roll.strategies.megatron.model import init_megatron

    sp = scenario.get("sp", False)
    parallel = {
        "tensor_model_parallel_size": scenario["tp"],
        "pipeline_model_parallel_size": 1,
        "expert_model_parallel_size": scenario.get("ep", 1),
        "sequence_parallel": sp,
        "seed": 1234,
    }
    init_megatron(parallel)
    hf = AutoModelForCausalLM.from_pretrained(scenario["model_dir"], dtype=torch.float32).eval()
    config = hf.config
    tp = ps.get_tensor_model_parallel_world_size()
    model = mm.build_gpt_model(config, mm.transformer_config(config, parallel), tp).eval()
    full = convert.hf_to_mcore(dict(hf.named_parameters()), config, tp)
    ep, ep_rank = ps.get_expert_model_parallel_world_size(), ps.get_expert_model_parallel_rank()
    local = convert.select_ep(full, convert.num_experts(config), ep, ep_rank)
    mm.load_into(model, convert.shard_tp(local, tp, ps.get_tensor_model_parallel_rank()))
    generator = torch.Generator().manual_seed(0)
    length = 13 if sp else 12
    ids = torch.randint(4, config.vocab_size, (3, length), generator=generator)
    mask = torch.ones(3, length, dtype=torch.long)
    mask[1, :3] = 0
    mask[2, :6] = 0
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    padded = [mm.pad_sequence(t, tp if sp else 1) for t in (ids, positions, mask)]
    with torch.no_grad():
        got = model(padded[0], padded[1], mm.attention_mask(padded[2]))[:, :length, : config.vocab_size]
        want = hf(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    norms = [p.sequence_parallel for n, p in model.named_parameters() if n.endswith("layernorm.weight")]
    return {"got": got, "want": want, "mask": mask, "tp": tp, "sp": model.config.sequence_parallel, "norms": norms}


def install_script_installs_megatron() -> bool:
    script = Path(__file__).resolve().parents[2] / "scripts" / "install.sh"
    return script.is_file() and "megatron" in script.read_text()


def require_megatron() -> None:
    """Skip (with the reason printed) without megatron-core — but fail under CI=true when
    scripts/install.sh installs it: there a missing megatron-core is a broken install, not an option."""
    import pytest

    if megatron_available():
        return
    if os.environ.get("CI", "").lower() == "true" and install_script_installs_megatron():
        pytest.fail(f"CI=true and scripts/install.sh installs megatron-core, but it is missing: {REASON}")
    print(f"SKIPPED megatron tests: {REASON}", flush=True)
    pytest.skip(REASON)
