"""Runs training strategies the way the ActorWorker does, in 2 real processes (gloo), without Ray.

`StandInWorker` is a test double for roll.distributed.worker.Worker: it carries exactly what a strategy
reads (rank, world_size, worker_config) — the config itself is the real roll.configs WorkerConfig, and
`loss_fn` is the real ActorWorker._policy_loss (vanilla PPO + KL loss + entropy via roll.algorithms).

The parent builds a tiny HF checkpoint and N training batches (`prepare`), the plain single-process
PyTorch reference runs in the parent (`plain_reference`), and `launch` spawns 2 ranks that run every
scenario in one go (imports and the gloo rendezvous are the slow part on this machine) and write their
results to a file. Each rank takes its data-parallel group's shard of every batch and only the collecting
ranks' scores count, as Dispatch.DP_MP_COMPUTE does (decorator.split_arguments / collect_results over the
layout the strategy reports).
"""

import dataclasses
import os
import shutil
import socket
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers

transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars, once per load and rank

from roll.algorithms import PolicyLossConfig  # noqa: E402 - after the progress-bar switch
from roll.configs.worker import ModelArgs, StrategyArgs, TrainingArgs, WorkerConfig  # noqa: E402 - after the progress-bar switch
from roll.distributed.data_proto import DataProto  # noqa: E402 - after the progress-bar switch
from roll.strategies.loss_settings import LossSettings  # noqa: E402 - after the progress-bar switch
from roll.utils.functional import compute_position_ids  # noqa: E402 - after the progress-bar switch

WORLD_SIZE = 2
STEPS = 3
ROWS_PER_RANK = 8
PROMPT_LENGTH, RESPONSE_LENGTH = 8, 8
# loss settings as the pipeline attaches them to a training batch (LossSettings.from_config; ppo_epochs and
# shuffle_seed are read by the workers' epoch loop, which these tests do not run). seq-mean-token-mean is the
# aggregation under which equal-size micro-batches, accumulation and data-parallel averaging give
# the same gradient as one big batch (token-mean normalises per micro-batch: see the report/docs).
LOSS = LossSettings(
    ppo_epochs=1,
    shuffle_seed=0,
    temperature=1.0,
    policy_loss_mode="vanilla",
    loss_agg_mode="seq-mean-token-mean",
    policy_loss_config=PolicyLossConfig(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0),
    use_kl_loss=True,
    kl_loss_type="low_var_kl",
    kl_loss_coef=0.05,
    entropy_loss_coef=0.01,
    value_clip=0.5,  # the critic's clipped value loss (CriticWorker._value_loss)
)
CRITIC_SEED = 1234  # rank r initialises the untrained value head with CRITIC_SEED + r: engines must use rank 0's
TRAINING = dict(learning_rate=1e-3, weight_decay=0.01, max_grad_norm=0.5, lr_scheduler_type="linear", warmup_steps=1)
DS = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
    "fp16": {"enabled": "auto"},
}


def ds_config(stage: int) -> dict:
    return {**DS, "zero_optimization": {"stage": stage}}


@dataclass
class StandInWorker:  # test double for roll.distributed.worker.Worker: what strategies read
    worker_config: WorkerConfig
    rank: int
    world_size: int
    model_kind: str = "causal_lm"


def make_worker_config(
    model_dir,
    strategy_name,
    strategy_config,
    micro,
    accumulation,
    world_size,
    gradient_checkpointing=False,
    dtype="float32",
) -> WorkerConfig:
    return WorkerConfig(
        name="actor_train",
        model_args=ModelArgs(
            model_name_or_path=str(model_dir),
            dtype=dtype,
            disable_gradient_checkpointing=not gradient_checkpointing,
        ),
        training_args=TrainingArgs(
            per_device_train_batch_size=micro, gradient_accumulation_steps=accumulation, **TRAINING
        ),
        strategy_args=StrategyArgs(strategy_name=strategy_name, strategy_config=strategy_config),
        world_size=world_size,
        infer_batch_size=3,
    )  # 3: uneven micro-batches for compute_log_probs


def loss_fn(micro: DataProto, logits: torch.Tensor):
    from roll.workers.actor_worker import ActorWorker

    return ActorWorker._policy_loss(None, micro, logits)  # the production loss; it uses no worker state


def value_loss_fn(micro: DataProto, logits: torch.Tensor):
    from roll.workers.critic_worker import CriticWorker

    return CriticWorker._value_loss(None, micro, logits)  # the production critic loss (no worker state)


def load_value_model(model_dir):
    """The critic's model as InferenceStrategy.load_model builds it (one-output head, no dropout)."""
    from transformers import AutoConfig, AutoModelForTokenClassification

    config = AutoConfig.from_pretrained(model_dir, num_labels=1)
    config.classifier_dropout = 0.0
    return AutoModelForTokenClassification.from_pretrained(model_dir, config=config, dtype=torch.float32)


# --- data and reference (parent process) ---------------------------------------------------------------
def prepare(directory: Path) -> tuple[Path, Path]:
    """A tiny Qwen2 checkpoint (hidden 64, 2 layers) and STEPS batches of WORLD_SIZE × ROWS_PER_RANK rows."""
    from transformers import AutoModelForCausalLM

    from roll.demo.tiny_model import build_tiny_model
    from roll.utils.functional import response_log_probs, slice_response_logits

    words = [f"w{i}" for i in range(150)] + ["the answer is", "\\boxed{7}", "add", "two", "numbers"]
    model_dir = build_tiny_model(str(directory / "model"), words, hidden_size=64, num_layers=2, num_heads=2, seed=3)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    batches = []
    rows = WORLD_SIZE * ROWS_PER_RANK
    for _ in range(STEPS):
        prompt_len = torch.randint(3, PROMPT_LENGTH + 1, (rows,), generator=generator)
        prompt_mask = (torch.arange(PROMPT_LENGTH) >= PROMPT_LENGTH - prompt_len[:, None]).long()  # left padded
        prompts = torch.randint(4, vocab, (rows, PROMPT_LENGTH), generator=generator) * prompt_mask
        response_len = torch.randint(1, RESPONSE_LENGTH + 1, (rows,), generator=generator)
        response_mask = (torch.arange(RESPONSE_LENGTH) < response_len[:, None]).float()
        responses = torch.randint(4, vocab, (rows, RESPONSE_LENGTH), generator=generator) * response_mask.long()
        attention_mask = torch.cat([prompt_mask, response_mask.long()], dim=1)
        batch = {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": compute_position_ids(attention_mask),
            "response_mask": response_mask,
        }
        with torch.no_grad():
            logits = model(**{k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}).logits
            current = response_log_probs(slice_response_logits(logits, RESPONSE_LENGTH), responses)
        # old policy ≠ current one, so the PPO ratio moves off 1 and some tokens clip
        batch["old_log_probs"] = (current + 0.3 * torch.randn(current.shape, generator=generator)) * response_mask
        batch["ref_log_probs"] = (current + 0.1 * torch.randn(current.shape, generator=generator)) * response_mask
        batch["advantages"] = torch.randn(rows, 1, generator=generator).expand(-1, RESPONSE_LENGTH) * response_mask
        batch["values"] = 0.5 * torch.randn(current.shape, generator=generator) * response_mask
        batch["returns"] = torch.randn(current.shape, generator=generator) * response_mask
        batches.append(batch)
    data_file = directory / "batches.pt"
    torch.save(batches, data_file)
    return Path(model_dir), data_file


def as_proto(tensors: dict, rows: slice | None = None, loss_agg_mode: str | None = None) -> DataProto:
    tensors = {k: v[rows] if rows is not None else v for k, v in tensors.items()}
    loss = dataclasses.replace(LOSS, loss_agg_mode=loss_agg_mode) if loss_agg_mode else LOSS
    batch = DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})
    loss.attach(batch)
    return batch


def partial_checkpoint(model_dir: Path, directory: Path) -> Path:
    """The same model saved without lm_head.weight: from_pretrained initialises it randomly."""
    from safetensors.torch import load_file, save_file

    out = directory / "model_without_lm_head"
    shutil.copytree(model_dir, out)
    weights = load_file(out / "model.safetensors")
    del weights["lm_head.weight"]
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return out


def save_scenario_checkpoint(strategy, target: Path, steps: int, rank: int) -> None:
    """A scenario's checkpoint after `steps` steps, written afresh by every rank; `steps` records how many."""
    if rank == 0 and target.exists():
        shutil.rmtree(target)
    torch.distributed.barrier()
    strategy.save_checkpoint(str(target))
    torch.distributed.barrier()
    if rank == 0:
        (target / "steps").write_text(str(steps))


def plain_steps(model, trainable, optimizer, scheduler, batches, args, micro: int, step_loss=None) -> list[dict]:
    """The single-process reference loop: per global batch, micro-batches of `micro` rows, loss / accumulation,
    clipping over `trainable`, one optimizer and schedule step; each step's mean metrics, grad_norm and lr."""
    step_loss = step_loss or loss_fn
    steps = []
    for tensors in batches:
        batch = as_proto(tensors)
        history = {}
        accumulation = args.gradient_accumulation_steps
        for index in range(accumulation):
            part = batch[slice(index * micro, (index + 1) * micro)]
            inputs = {k: part.batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
            loss, metrics = step_loss(part, model(**inputs, use_cache=False).logits)
            (loss / accumulation).backward()
            for key, value in metrics.items():
                history.setdefault(key, []).append(value)
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        metrics = {key: sum(values) / len(values) for key, values in history.items()}
        metrics.update(grad_norm=grad_norm.item(), lr=scheduler.get_last_lr()[0])
        steps.append(metrics)
    return steps


def plain_reference(model_dir: Path, data_file: Path, micro: int = 4, critic: bool = False) -> dict:
    """Single process, plain PyTorch: HF model, AdamW, the same LR schedule and clipping; the whole global
    batch per step in micro-batches of `micro` rows, loss / accumulation, one optimizer step. `critic`:
    the value model (head initialised as rank 0 does) and the value loss."""
    from transformers import AutoModelForCausalLM

    from roll.strategies.train_common import build_adamw, build_lr_scheduler

    batches = torch.load(data_file)
    args = TrainingArgs(
        per_device_train_batch_size=micro, gradient_accumulation_steps=WORLD_SIZE * ROWS_PER_RANK // micro, **TRAINING
    )
    if critic:
        torch.manual_seed(CRITIC_SEED)
        model = load_value_model(model_dir)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    step_loss = value_loss_fn if critic else loss_fn
    model.train()
    optimizer = build_adamw(model.parameters(), args)
    scheduler = build_lr_scheduler(optimizer, args, STEPS)
    steps = plain_steps(model, list(model.parameters()), optimizer, scheduler, batches, args, micro, step_loss)
    return {"steps": steps, "params": {name: p.detach().clone() for name, p in model.named_parameters()}}


# --- the 2-rank side ---------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(
    scenarios: list[dict], model_dir: Path, data_file: Path, workdir: Path, timeout: float = 600, world_size: int = 0
) -> dict:
    """Runs `scenarios` in `world_size` (default WORLD_SIZE) spawned ranks; returns {scenario name: result}
    written by rank 0."""
    import torch.multiprocessing as mp

    port = _free_port()
    world_size = world_size or WORLD_SIZE
    context = mp.start_processes(
        _rank_main,
        args=(port, scenarios, str(model_dir), str(data_file), str(workdir), world_size),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=5):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                raise TimeoutError(f"strategy scenarios did not finish within {timeout} s")
    except (mp.ProcessRaisedException, mp.ProcessExitedException, TimeoutError) as error:
        progress = {
            rank: (workdir / f"progress-{rank}.txt").read_text().splitlines()[-3:]
            if (workdir / f"progress-{rank}.txt").exists()
            else []
            for rank in range(world_size)
        }
        last = f"done {scenarios[-1]['name']} in "
        finished = all(lines and lines[-1].startswith(last) for lines in progress.values())
        if not (isinstance(error, mp.ProcessExitedException) and finished and (workdir / "results.pt").exists()):
            raise RuntimeError(f"{error}\nlast progress per rank: {progress}") from error
        # every rank finished every scenario and rank 0 wrote the results: a rank that dies in gloo's teardown
        # afterwards ("terminate called without an active exception", seen once in CI-like runs) lost nothing
        warnings.warn(f"a rank died after its last scenario ({error}); the results are complete", stacklevel=1)
    return torch.load(workdir / "results.pt", weights_only=False)


def _rank_main(rank: int, port: int, scenarios, model_dir, data_file, workdir, world_size=WORLD_SIZE) -> None:
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
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # gloo collective renames, once per call

    dist.init_process_group("gloo")
    batches = torch.load(data_file)
    results = {}
    progress = open(Path(workdir) / f"progress-{rank}.txt", "a", buffering=1)
    for scenario in scenarios:
        started = time.monotonic()
        progress.write(f"start {scenario['name']}\n")
        try:
            runner = _runner(scenario.get("runner"))
            result = runner(scenario, rank, Path(model_dir), batches, Path(workdir))
        except Exception:  # noqa: BLE001 — reported per scenario, the other ranks may hang otherwise
            result = {"error": traceback.format_exc()}
            print(f"[rank {rank}] scenario {scenario['name']} failed:\n{result['error']}", flush=True)
            raise
        result["seconds"] = time.monotonic() - started
        progress.write(f"done {scenario['name']} in {result['seconds']:.1f} s\n")
        results[scenario["name"]] = result
        if rank == 0:
            print(f"scenario {scenario['name']}: {result['seconds']:.1f} s", flush=True)
    if rank == 0:
        torch.save(results, Path(workdir) / "results.pt")
    dist.barrier()
    dist.destroy_process_group()


def _runner(dotted: str | None):
    """A scenario's `runner` (dotted path of a function with run_scenario's signature; default run_scenario),
    so other test modules share this launch with their own scenarios."""
    if dotted is None:
        return run_scenario
    import importlib

    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _gathered_metrics(metrics: dict) -> dict:
    """Mean over ranks of each rank's micro-batch-averaged metrics (= the global mean here)."""
    import torch.distributed as dist

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, metrics)
    return {key: sum(m[key] for m in everyone) / len(everyone) for key in metrics}


def dp_layout(strategy, world_size: int):
    """The role's DataParallelLayout, as the Cluster builds it from every rank's report (collective)."""
    from roll.distributed.decorator import DataParallelLayout

    info = strategy.data_parallel_info() if hasattr(strategy, "data_parallel_info") else None
    info = info or {"dp_rank": strategy.rank, "dp_size": world_size, "collect": True}
    reports = [None] * world_size
    torch.distributed.all_gather_object(reports, info)
    return DataParallelLayout.from_reports(reports, "harness")


def dispatched(batch: DataProto, layout, rank: int) -> DataProto:
    """This rank's shard of `batch`, by the Cluster's split."""
    from roll.distributed.decorator import Dispatch, split_arguments

    return split_arguments(Dispatch.DP_MP_COMPUTE, len(layout.dp_ranks), (batch,), {}, layout)[rank][0][0]


def collected(result, layout) -> list:
    """The collecting ranks' results in data-parallel order, as the Cluster returns them (collective)."""
    from roll.distributed.decorator import Dispatch, collect_results

    everyone = [None] * len(layout.dp_ranks)
    torch.distributed.all_gather_object(everyone, result)
    return collect_results(Dispatch.DP_MP_COMPUTE, everyone, layout)


def uneven_scoring_batch(tensors: dict, layout, rank: int) -> DataProto:
    """Rows 0-9 of a batch, 3 / 7 over two data-parallel groups (1 vs 3 forwards of infer_batch_size=3
    rows: sharded engines must pad the shorter one's forwards to stay in step), all 10 with one group."""
    dp_rank = layout.dp_ranks[rank]
    rows = slice(0, 10) if layout.dp_size == 1 else _uneven_rows(dp_rank)
    return as_proto(tensors, rows)


def run_scenario(scenario: dict, rank: int, model_dir: Path, batches, workdir: Path) -> dict:
    """scenario keys: name, strategy, config, micro, accumulation, [gradient_checkpointing], [dtype],
    [save_after] (checkpoint after that many steps), [resume_from] (scenario name: load its checkpoint and
    run the remaining steps), [offload] (offload + reload watched by offload_probe + a scoring forward before
    every step),
    [critic] (value model + value loss), [model] (another HF folder under workdir), [steps] (default STEPS),
    [loss_agg_mode] (instead of LOSS's), [worker] (WorkerConfig fields to override, e.g. dynamic batching),
    [model_args] (ModelArgs fields to override, e.g. freeze_module_prefix),
    [record_micro_rows] (record the rows of each micro-batch split_train_batch makes, per step)."""
    from roll.strategies import create_strategy
    from roll.strategies.train_common import split_train_batch
    from tests.strategies import offload_probe

    if scenario["strategy"].endswith("_infer"):
        return run_infer_scenario(
            scenario, rank, workdir / scenario["model"] if scenario.get("model") else model_dir, batches
        )
    world = torch.distributed.get_world_size()  # WORLD_SIZE, or a launch's own (megatron_scenarios)
    config = make_worker_config(
        workdir / scenario["model"] if scenario.get("model") else model_dir,
        scenario["strategy"],
        scenario["config"],
        scenario["micro"],
        scenario["accumulation"],
        world,
        scenario.get("gradient_checkpointing", False),
        scenario.get("dtype", "float32"),
    )
    config = dataclasses.replace(config, **scenario.get("worker", {}))
    config.model_args = dataclasses.replace(config.model_args, **scenario.get("model_args", {}))
    critic = scenario.get("critic", False)
    strategy = create_strategy(
        scenario["strategy"], StandInWorker(config, rank, world, "value" if critic else "causal_lm")
    )
    if critic or scenario.get("model"):
        torch.manual_seed(CRITIC_SEED + rank)  # weights missing from the checkpoint differ per rank until synced
    strategy.initialize(total_steps=STEPS)
    first_step = 0
    if scenario.get("resume_from"):
        source = workdir / scenario["resume_from"]
        first_step = int((source / "steps").read_text())
        strategy.load_checkpoint(str(source))
    layout = dp_layout(strategy, world)
    steps, scored, micro_counts, round_trips, received = [], [], [], [], None
    for step in range(first_step, scenario.get("steps", STEPS)):
        batch = dispatched(as_proto(batches[step], None, scenario.get("loss_agg_mode")), layout, rank)
        if received is None:  # the rows each rank got at the first step
            received = [None] * world
            torch.distributed.all_gather_object(received, batch.batch["input_ids"])
        if scenario.get("record_micro_rows"):  # rows per micro-batch of each step (collective)
            micro_counts.append([len(part) for part in split_train_batch(config, batch)])
        if scenario.get("offload"):  # watched: every engine tensor leaves at offload, returns unchanged
            round_trips.append(offload_probe.round_trip(strategy))
            scored.append(strategy.compute_log_probs(batch))  # the pipeline scores between phases
        steps.append(_gathered_metrics(strategy.train_step(batch, value_loss_fn if critic else loss_fn)))
        if scenario.get("save_after") == step + 1:
            save_scenario_checkpoint(strategy, workdir / scenario["name"], step + 1, rank)
    params = {name: tensor.detach().cpu().clone() for name, tensor in strategy.named_hf_parameters()}
    # log-probs of the final model on rows 0-9 of batch 0 (uneven_scoring_batch)
    scoring = strategy.compute_values if critic else strategy.compute_log_probs
    everyone = collected(scoring(uneven_scoring_batch(batches[0], layout, rank)), layout)
    checksum = strategy.state_checksum()
    result = {
        "first_step": first_step,
        "steps": steps,
        "params": params,
        "log_probs": everyone,
        "checksum": checksum,
        "micro_rows": micro_counts,
        "layout": layout,
        "received": received,
        "round_trips": round_trips,
    }
    if scenario.get("save_after"):
        hf_dir = workdir / scenario["name"] / "hf"
        result["hf_files"] = sorted(p.name for p in hf_dir.iterdir()) if hf_dir.is_dir() else []
    del strategy
    return result


def _uneven_rows(rank: int) -> slice:
    return slice(0, 3) if rank == 0 else slice(3, 10)


def run_infer_scenario(scenario: dict, rank: int, model_dir: Path, batches) -> dict:
    """Forward-only strategies: [offload] (an offload/reload round trip watched by offload_probe first),
    log-probs of the saved model, checksum, then a weight load (as a weight sync would send) and the
    state it leaves. [model] and [model_args] as in run_scenario."""
    from roll.strategies import create_strategy
    from tests.strategies import offload_probe

    world = torch.distributed.get_world_size()
    config = make_worker_config(model_dir, scenario["strategy"], scenario["config"], 1, 1, world)
    config = dataclasses.replace(config, **scenario.get("worker", {}))
    config.model_args = dataclasses.replace(config.model_args, **scenario.get("model_args", {}))
    strategy = create_strategy(scenario["strategy"], StandInWorker(config, rank, world))
    strategy.initialize()
    round_trips = [offload_probe.round_trip(strategy)] if scenario.get("offload") else []  # before scoring
    layout = dp_layout(strategy, world)

    def gathered_log_probs():
        return collected(strategy.compute_log_probs(uneven_scoring_batch(batches[0], layout, rank)), layout)

    result = {"log_probs": gathered_log_probs(), "checksum": strategy.state_checksum(), "round_trips": round_trips}
    if scenario.get("load_weights"):
        shifted = [(name, tensor.detach().cpu().clone() + 0.01) for name, tensor in strategy.named_hf_parameters()]
        strategy.load_weights(shifted)
        result.update(
            shifted_checksum=strategy.state_checksum(),
            shifted_log_probs=gathered_log_probs(),
            params={name: t.detach().cpu().clone() for name, t in strategy.named_hf_parameters()},
        )
    return result


def tiny_qwen3_moe():
    """A random 2-layer Qwen3-MoE (layer 0 dense, layer 1 sparse with 4 experts), built in memory."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_experts=4, num_experts_per_tok=2,
        mlp_only_layers=[0],
    )  # fmt: skip
    torch.manual_seed(0)
    return Qwen3MoeForCausalLM(config)
