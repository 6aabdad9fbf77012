"""roll against TRL's GRPOTrainer on one GPU, one after the other: seconds per step, start-up, phases, tokens per
second, GPU utilisation and peak memory of each, and the ratios roll / TRL.

    pip install 'roll[trl]'
    python benchmarks/gpu_vs_trl.py [--steps 4] [--dtype bfloat16] [--strategy fsdp2] [--json FILE]
        [--model_dir DIR] [--sides roll trl] [--fast] [--roll_overrides KEY=VALUE ...] [--label NAME]
    python benchmarks/gpu_vs_trl.py --tiny          # CPU: hidden 64, 2 layers, 2 steps (what CI runs)

The work, the same on both sides (benchmarks/vs_trl.py matches the CPU demo the same way, and its
matched_dataset / matched_grpo_settings are used here):
  model       a Qwen2 of the 0.36 B shape of benchmarks/gpu_scale.py (hidden 896, 24 layers, 14 / 2 heads,
              intermediate 4864, the demo's small vocabulary), random init saved in --dtype, or --model_dir (e.g.
              benchmarks/gpu_learn.py's warm start); TRL loads the same folder, its reference model too
  prompts     the demo's training prompts through the chat template, checked token for token (vs_trl)
  per step    32 prompts x 8 samples, up to 128 new tokens at temperature 1 (no top-k / top-p), HF `generate`
              with a KV cache on both sides (roll: actor_infer `hf_infer`; TRL: its default path without vLLM),
              math-verify reward, GRPO advantages, then 4 optimizer steps of 64 samples (one epoch), each side
              computing the old log-probs (a pass before the updates) and the reference log-probs
  loss        PPO-clip 0.2, token-mean (TRL loss_type "bnpo"), KL k3 ("low_var_kl" = TRL's) coefficient 0.001
  optimizer   AdamW lr 1e-6 (small: random weights must not diverge into NaN during the timed steps), constant,
              grad-norm clip 1.0, no gradient checkpointing
  precision   bf16 compute on both sides
roll runs the demo config (examples/tiny_rlvr/rlvr_tiny.yaml) with every role on GPU 0 as gpu_scale.py does:
actor_train on --strategy (FSDP2 by default), actor_infer and reference on hf_infer, each colocation switch and
the weight sync (checksum-checked) inside its step. TRL runs GRPOTrainer in one process on the same GPU.

What cannot be matched (and which way it leans):
  - roll keeps float32 master weights and Adam moments (FSDP2 mixed precision: bf16 compute, fp32 reduce); TRL,
    given a bf16 model (--trl_weights bf16, the default), updates bf16 weights with bf16 Adam moments (fewer bytes;
    --trl_weights float32 loads fp32 weights under bf16 autocast instead; its HF generate then runs in fp32,
    since TRL's generation is outside autocast)
  - roll's roles are separate processes (Ray) and take turns on the GPU: the trainer's state is offloaded to host
    and back around the other phases, and the weights are synced (1 x bf16 weights) into the inference engine
    after each step; TRL generates with the model it trains, nothing moves
  - roll overlaps the reward with the reference pass; TRL runs its phases one after another
  - TRL's log-probs use its fused LM head (chunked log-softmax, no full logits); roll's take the full logits
  - the random draws differ (each side's own sampling); with random weights every sample runs to 128 tokens on
    both sides, so the work per step is the same
Phases: roll's are its timing/* metrics (generate, reward, old_log_probs, ref_log_probs, train, weight_sync, ...,
overlapping lanes counted in each); TRL's are timed around its methods (_generate_single_turn = generate,
_calculate_rewards = reward, the no-grad _get_per_token_logps_and_entropies of the policy / reference model =
old_log_probs / ref_log_probs, the rest of _generate_and_score_completions = other, the step's remainder = train),
with a CUDA synchronise at each boundary. The first step pays one-off warm-ups: seconds per step and the phases
are medians over the steps after it. Start-up: "process" = from the child process's start to the first step
ready, "in-process" = building the trainer (roll: RLVRPipeline(config); TRL: GRPOTrainer(...)).
GPU utilisation and memory: nvidia-smi every 0.5 s from this process (all processes on the GPU); utilisation is
the mean over each side's timed steps, memory the peak over its whole run. On CPU both are "n/a".
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmarks, also when loaded by path

import gpu_scale  # noqa: E402 — after the path
import vs_trl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = {**gpu_scale.TINY, "steps": 2, "train_batch": 4, "dtype": "float32"}  # 2 optimizer steps per generation
SIDES = ("roll", "trl")
DIFF = "old_log_probs_max_abs_diff"
# --fast: roll's switches for a GPU with memory for every role at once (docs/gpu.md): no role is offloaded around
# the others' phases (keep_resident; the round trip is exact, so nothing else changes) and hf_infer generates with
# a static KV cache, which transformers compiles on a GPU (the same samples up to float rounding)
FAST_OVERRIDES = [
    "actor_train.strategy_args.strategy_config={keep_resident: true}",  # fsdp2 only
    "actor_infer.strategy_args.strategy_config={cache_implementation: static, keep_resident: true}",
    "reference.strategy_args.strategy_config={keep_resident: true}",
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for key in ("hidden", "layers", "heads", "kv_heads", "intermediate"):
        p.add_argument(f"--{key}", type=int, default=getattr(gpu_scale.parse_args([]), key))
    p.add_argument("--steps", type=int, default=4, help="generation steps per side (the first is not timed)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    p.add_argument("--strategy", choices=list(gpu_scale.STRATEGIES), default="fsdp2", help="roll's actor_train")
    p.add_argument("--prompts", type=int, default=32, help="rollout_batch_size")
    p.add_argument("--group", type=int, default=8, help="num_return_sequences_in_group")
    p.add_argument("--response_length", type=int, default=128)
    p.add_argument("--train_batch", type=int, default=64, help="samples per optimizer step")
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model_dir", default=None, help="an HF folder with the demo tokenizer (default: random init)")
    p.add_argument("--trl_weights", choices=["bfloat16", "float32"], default=None, help="default: --dtype")
    p.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    p.add_argument("--roll_overrides", nargs="*", default=[], help="extra Hydra overrides for roll's config")
    p.add_argument("--fast", action="store_true", help="roll (fsdp2) with FAST_OVERRIDES: " + " ".join(FAST_OVERRIDES))
    p.add_argument("--label", default="", help="a name for this run in the report")
    p.add_argument("--work_dir", default=None, help="keep the model and the data here (default: a temp dir)")
    p.add_argument("--timeout", type=float, default=900, help="seconds each side may take")
    p.add_argument("--tiny", action="store_true", help="CPU-sized defaults: " + json.dumps(TINY))
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # child process
    if p.parse_args(argv).tiny:
        p.set_defaults(**TINY)
    args = p.parse_args(argv)
    args.trl_weights = args.trl_weights or args.dtype
    if args.fast:
        if args.strategy != "fsdp2":
            p.error("--fast sets fsdp2's strategy_config (keep_resident): use it with --strategy fsdp2")
        args.roll_overrides = [*FAST_OVERRIDES, *args.roll_overrides]
    return args


# ---- the shared set-up -----------------------------------------------------------------------------------
def prepare(args, work: Path) -> Path:
    """The demo's data and tokenizer under work/demo, and the model (random init unless --model_dir)."""
    from roll.demo.rlvr import DemoSettings, prepare_demo

    prepare_demo(work / "demo", DemoSettings(warm_start_steps=0), log=lambda *_: None)  # tokenizer + data only
    if args.model_dir:
        return Path(args.model_dir)
    model_dir = work / "model"
    if not (model_dir / "config.json").is_file():
        parameters = gpu_scale.build_model(args, work / "demo", model_dir)
        print(f"built a random-init Qwen2 of {parameters / 1e9:.3f} B parameters in {model_dir}", flush=True)
    return model_dir


def roll_config(args, work: Path, model_dir: Path, output_dir: Path, start_ray: bool = False):
    """The config both sides take their settings from: the demo config as gpu_scale.py runs it."""
    from roll.cli import load_while_ray_starts
    from roll.configs import compose_config
    from roll.pipeline.rlvr.config import load_rlvr_config

    overrides = gpu_scale.overrides(args, work / "demo", model_dir, output_dir)
    overrides += [f"seed={args.seed}", f"actor_train.training_args.learning_rate={args.lr}", *args.roll_overrides]
    composed = compose_config(str(ROOT / "examples" / "tiny_rlvr"), "rlvr_tiny", overrides)
    return load_while_ray_starts(load_rlvr_config, composed) if start_ray else load_rlvr_config(composed)


# ---- roll (child process) ------------------------------------------------------------------------------
def run_roll(args, work: Path, model_dir: Path) -> dict:
    from roll.pipeline.core.callbacks import StepCallback
    from roll.pipeline.core.profiling import phase_seconds
    from roll.pipeline.rlvr.pipeline import RLVRPipeline
    from roll.utils.progress import process_age

    ends = {}

    class Steps(StepCallback):
        def on_step_end(self, step, batch, metrics):  # metrics before timing/step: that comes from the history
            ends[step] = {
                "end": time.time(),
                "response_tokens": int(batch.batch["response_mask"].sum().item()),
                "train_tokens": int(batch.batch["attention_mask"].sum().item()),
            }

    with tempfile.TemporaryDirectory() as output_dir:
        config = roll_config(args, work, model_dir, Path(output_dir), start_ray=True)
        started = time.perf_counter()
        with RLVRPipeline(config, callbacks=[Steps()]) as pipeline:
            startup, process_startup = time.perf_counter() - started, process_age()
            history = pipeline.run()
    steps = []
    for step, metrics in sorted(history["steps"].items()):
        seconds = metrics["timing/step"]  # eval_steps=0: no validation inside
        steps.append(
            {
                **ends[step],
                "start": ends[step]["end"] - seconds,
                "seconds": seconds,
                "phases": {k.removeprefix("timing/"): v for k, v in phase_seconds(metrics).items()},
                "old_log_probs_reused": metrics.get("old_log_probs/reused"),
                # the measuring step's max |rollout - recomputed| (why the pass is or is not skipped), the
                # colocation switches' seconds (inside the phases)
                "old_log_probs_max_abs_diff": metrics.get("old_log_probs/max_abs_diff"),
                "offload_reload": metrics.get("timing/offload_reload"),
            }
        )
    return {"startup": startup, "process_startup": process_startup, "steps": steps}


# ---- TRL (child process) -------------------------------------------------------------------------------
class PhaseClock:
    """Seconds per phase since the last `take()`, each timed call bracketed by a CUDA synchronise (on GPU)."""

    def __init__(self, gpu: bool):
        import torch

        self.sync = torch.cuda.synchronize if gpu else (lambda: None)
        self.seconds: dict[str, float] = {}
        self.tokens = {"response_tokens": 0, "train_tokens": 0}

    def wrap(self, fn, phase):
        """fn timed into `phase` (a name, or a function of the call's arguments giving one; None: not timed)."""

        def timed(*args, **kwargs):
            name = phase(*args, **kwargs) if callable(phase) else phase
            if name is None:
                return fn(*args, **kwargs)
            self.sync()
            started = time.perf_counter()
            out = fn(*args, **kwargs)
            self.sync()
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
            return out

        return timed

    def take(self) -> tuple[dict, dict]:
        seconds, tokens = self.seconds, self.tokens
        self.seconds, self.tokens = {}, {"response_tokens": 0, "train_tokens": 0}
        return seconds, tokens


def instrument(trainer, clock: PhaseClock) -> None:
    """Times TRL's phases (see the module docstring) and counts the tokens of each generation."""
    import torch

    def scoring(*args, **kwargs):  # the no-grad passes before the updates; the loss's own forward is train
        if torch.is_grad_enabled():
            return None
        model = args[0] if args else kwargs["model"]
        return "ref_log_probs" if model is trainer.ref_model else "old_log_probs"

    trainer._generate_single_turn = clock.wrap(trainer._generate_single_turn, "generate")
    trainer._calculate_rewards = clock.wrap(trainer._calculate_rewards, "reward")
    trainer._get_per_token_logps_and_entropies = clock.wrap(trainer._get_per_token_logps_and_entropies, scoring)
    make_experience = clock.wrap(trainer._generate_and_score_completions, "make_experience")

    def counted(inputs):
        out = make_experience(inputs)
        clock.tokens["response_tokens"] += int(out["completion_mask"].sum())
        clock.tokens["train_tokens"] += int(out["completion_mask"].sum() + out["prompt_mask"].sum())
        return out

    trainer._generate_and_score_completions = counted


def run_trl(args, work: Path, model_dir: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from roll.utils.progress import process_age

    gpu = torch.cuda.is_available()
    config = roll_config(args, work, model_dir, work / "unused")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, args.trl_weights))
    dataset = vs_trl.matched_dataset(tokenizer, config, vs_trl.read_rows(work / "demo" / "train.jsonl"))
    settings, optimizer_steps = vs_trl.matched_grpo_settings(config, args.seed, args.steps)
    trl_args = GRPOConfig(
        **settings,
        output_dir=str(work / "trl_out"),
        use_cpu=not gpu,
        bf16=args.dtype == "bfloat16",
        logging_steps=10**9,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    clock = PhaseClock(gpu)
    steps = []

    class Clock(TrainerCallback):
        """A step = one generation and its optimizer steps (TRL generates inside the first of them)."""

        def on_train_begin(self, *_, **__):
            clock.sync()
            self.last = time.time()
            clock.take()

        def on_step_end(self, _args, state, *_, **__):
            if state.global_step % optimizer_steps:
                return
            clock.sync()
            now = time.time()
            phases, tokens = clock.take()
            make_experience = phases.pop("make_experience", 0.0)
            phases["other"] = max(0.0, make_experience - sum(phases.values()))  # tokenising, padding, advantages
            phases["train"] = now - self.last - make_experience
            steps.append({"start": self.last, "end": now, "seconds": now - self.last, "phases": phases, **tokens})
            self.last = now

    started = time.perf_counter()
    trainer = GRPOTrainer(
        model=model, reward_funcs=vs_trl.math_reward, args=trl_args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.add_callback(Clock())
    instrument(trainer, clock)
    startup, process_startup = time.perf_counter() - started, process_age()
    trainer.train()
    peak = torch.cuda.max_memory_allocated() / 2**20 if gpu else None
    return {"startup": startup, "process_startup": process_startup, "steps": steps, "torch_peak_mib": peak}


# ---- parent --------------------------------------------------------------------------------------------
def child_command(args, side: str, work: Path, model_dir: Path) -> list[str]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--side", side, "--work_dir", str(work)]
    argv += ["--model_dir", str(model_dir)]
    for key in ("hidden", "layers", "heads", "kv_heads", "intermediate", "steps", "prompts", "group"):
        argv += [f"--{key}", str(getattr(args, key))]
    for key in ("response_length", "train_batch", "lr", "seed", "dtype", "strategy", "trl_weights"):
        argv += [f"--{key}", str(getattr(args, key))]
    if args.roll_overrides:
        argv += ["--roll_overrides", *args.roll_overrides]
    return argv


def run_side(args, side: str, work: Path, model_dir: Path, sampler) -> dict:
    """One side in its own process (its GPU memory is freed when it exits); its figures from its last line."""
    # roll's child starts a Ray of its own (not a cluster this process or a test session may have started)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    env["RAY_ADDRESS"] = "local"
    began = time.time()
    try:
        done = subprocess.run(
            child_command(args, side, work, model_dir), env=env, capture_output=True, text=True, timeout=args.timeout
        )
    except subprocess.TimeoutExpired as error:
        tail = (error.stdout or b"")[-4000:], (error.stderr or b"")[-4000:]
        raise SystemExit(f"gpu_vs_trl: the {side} side ran past --timeout {args.timeout:.0f} s\n{tail}") from None
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-6000:] + done.stderr[-6000:])
        raise SystemExit(f"gpu_vs_trl: the {side} side failed with exit code {done.returncode}")
    result = last_json_line(done.stdout, side)
    result["wall"] = time.time() - began
    return summarise(side, result, sampler, began)


def last_json_line(stdout: str, side: str) -> dict:
    """The child's figures: its last line that is a JSON object (Ray may print worker lines around it)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise SystemExit(f"gpu_vs_trl: the {side} side printed no figures; its output ended:\n{stdout[-3000:]}")


def gpu_name() -> str:
    """The GPU's name from nvidia-smi (this process creates no CUDA context: the sides' memory is theirs alone)."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "GPU"


def summarise(side: str, result: dict, sampler, began: float) -> dict:
    """Medians over the steps after the first (all of them where there is one), tokens per second, GPU figures."""
    steps = result["steps"]
    if not steps:
        raise SystemExit(f"gpu_vs_trl: the {side} side reported no step")
    timed = steps[1:] or steps
    names = sorted({name for s in timed for name in s["phases"]})
    phases = {name: statistics.median(s["phases"].get(name, 0.0) for s in timed) for name in names}
    generate = sum(s["phases"].get("generate", 0.0) for s in timed)
    train = sum(s["phases"].get("train", 0.0) for s in timed)
    utilisation = peak = None
    if sampler is not None:
        in_steps = [u for s in timed for _, u, _ in sampler.between_wall(s["start"], s["end"])]
        utilisation = statistics.fmean(in_steps) if in_steps else None
        peak = max((m for _, _, m in sampler.between_wall(began, time.time())), default=None)
    return {
        "side": side,
        "s_per_step": statistics.median(s["seconds"] for s in timed),
        "step_seconds": [s["seconds"] for s in steps],
        "startup_process": result["process_startup"],
        "startup_in_process": result["startup"],
        "phases": phases,
        "rollout_tokens_per_s": sum(s["response_tokens"] for s in timed) / generate if generate else None,
        "train_tokens_per_s": sum(s["train_tokens"] for s in timed) / train if train else None,
        "response_tokens_per_step": statistics.median(s["response_tokens"] for s in timed),
        "gpu_utilisation_mean": utilisation,
        "gpu_memory_peak_mib": peak,
        "torch_peak_mib": result.get("torch_peak_mib"),
        "old_log_probs_reused": [s.get("old_log_probs_reused") for s in steps if "old_log_probs_reused" in s],
        "old_log_probs_max_abs_diff": next((s[DIFF] for s in steps if s.get(DIFF) is not None), None),
        "offload_reload_per_step": (
            statistics.median(s["offload_reload"] or 0.0 for s in timed) if "offload_reload" in steps[0] else None
        ),
        "wall": result["wall"],
    }


class WallSampler(gpu_scale.Sampler):
    """gpu_scale's nvidia-smi sampler on wall-clock time (the sides' step times come from other processes)."""

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.samples.append((time.time(), *self.read()))

    def between_wall(self, start: float, end: float):
        return [s for s in self.samples if start <= s[0] <= end]


def ratios(roll: dict, trl: dict) -> dict:
    def ratio(key):
        a, b = roll.get(key), trl.get(key)
        return a / b if a is not None and b else None

    keys = ("s_per_step", "startup_process", "startup_in_process", "rollout_tokens_per_s", "train_tokens_per_s")
    out = {key: ratio(key) for key in keys}
    for phase in ("generate", "train", "old_log_probs", "ref_log_probs"):
        a, b = roll["phases"].get(phase), trl["phases"].get(phase)
        out[f"phase/{phase}"] = a / b if a is not None and b else None
    return out


def fmt(value, spec=".2f", unit=""):
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def report(result: dict) -> str:
    lines = [
        "| side | s/step (median) | start-up process / in-process | rollout tok/s | train tok/s | GPU util "
        "(mean, steps) | peak GPU memory | phases (median s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for side in result["sides"].values():
        phases = ", ".join(f"{k} {v:.2f}" for k, v in side["phases"].items())
        memory = fmt(side["gpu_memory_peak_mib"] and side["gpu_memory_peak_mib"] / 1024, ".1f", " GiB")
        lines.append(
            f"| {side['side']} | {side['s_per_step']:.2f} | {side['startup_process']:.1f} / "
            f"{side['startup_in_process']:.1f} s | {fmt(side['rollout_tokens_per_s'], ',.0f')} | "
            f"{fmt(side['train_tokens_per_s'], ',.0f')} | {fmt(side['gpu_utilisation_mean'], '.0f', ' %')} | "
            f"{memory} | {phases} |"
        )
    if result.get("ratios"):
        r = result["ratios"]
        lines += [
            "",
            "| roll / TRL | s/step | start-up (process) | generate | train | old log-probs | rollout tok/s |",
            "|---|---|---|---|---|---|---|",
            f"| {result['label'] or 'ratio'} | {fmt(r['s_per_step'])} | {fmt(r['startup_process'])} | "
            f"{fmt(r['phase/generate'])} | {fmt(r['phase/train'])} | {fmt(r['phase/old_log_probs'])} | "
            f"{fmt(r['rollout_tokens_per_s'])} |",
        ]
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.side:  # child: one side, one JSON line
        work, model_dir = Path(args.work_dir), Path(args.model_dir)
        result = (run_roll if args.side == "roll" else run_trl)(args, work, model_dir)
        print(json.dumps(result))
        return result
    import torch
    import trl

    gpu = torch.cuda.is_available()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    device = gpu_name() if gpu else f"CPU ({os.cpu_count()} cores)"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work_dir or tmp)
        model_dir = prepare(args, work)
        print(
            f"gpu_vs_trl at commit {commit.stdout.strip() or '?'} on {device}; torch {torch.__version__}, "
            f"TRL {trl.__version__}; model {model_dir}; {args.dtype}; {args.prompts} x {args.group} samples of up to "
            f"{args.response_length} tokens, {args.steps} steps; roll overrides {args.roll_overrides or 'none'}",
            flush=True,
        )
        sampler = WallSampler(gpu) if gpu else None
        if sampler:
            sampler.start()
        sides = {}
        try:
            for side in args.sides:
                sides[side] = run_side(args, side, work, model_dir, sampler)
                s = sides[side]
                extra = ""
                if side == "roll":  # why the old-log-prob pass ran or not; what the colocation switches cost
                    extra = (
                        f"; old log-probs reused {s['old_log_probs_reused']} (measured max |diff| "
                        f"{fmt(s['old_log_probs_max_abs_diff'], '.3g')}); offload/reload "
                        f"{fmt(s['offload_reload_per_step'])} s per step"
                    )
                print(
                    f"{side}: {s['s_per_step']:.2f} s/step (median of steps 2..; all: "
                    f"{', '.join(f'{x:.2f}' for x in s['step_seconds'])}), start-up {s['startup_process']:.1f} s"
                    + extra,
                    flush=True,
                )
        finally:
            if sampler:
                sampler.stopped.set()
                sampler.join(timeout=15)
    result = {
        "label": args.label,
        "commit": commit.stdout.strip(),
        "device": device,
        "torch": torch.__version__,
        "trl": trl.__version__,
        "settings": {k: v for k, v in vars(args).items() if k not in ("side", "json", "work_dir")},
        "sides": sides,
        "ratios": ratios(sides["roll"], sides["trl"]) if len(sides) == 2 else None,
    }
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
