"""roll against TRL's GRPOTrainer on the embedded demo, one after the other on this machine.

    pip install 'roll[trl]'                     # TRL is only a benchmark dependency
    python benchmarks/vs_trl.py [--seeds 0 1 2] [--max_steps 60] [--eval_steps 10] [--threads 1 2]

Both sides start from the same warm-started tiny model (examples/tiny_rlvr/prepare_demo.py, prepared here
when missing) and train on the same prompts (chat template, checked token for token) with the settings of
examples/tiny_rlvr/rlvr_tiny.yaml:
  32 prompts x 8 samples per step, 6 new tokens at temperature 1, GRPO advantages (group mean / std),
  PPO-clip 0.2, token-mean loss, KL loss k3 ("low_var_kl") with coefficient 0.001 against the start model,
  AdamW lr 1e-3 (constant, no decay), grad-norm clip 1.0, 4 optimizer steps of 64 samples per generation,
  fp32, no gradient checkpointing;
and are evaluated alike: greedy replies to the 192 held-out prompts graded by math-verify, before training
and every --eval_steps steps. A "step" is one generation and its 4 optimizer steps (TRL counts optimizer
steps: its max_steps is 4x ours). Evaluation time is excluded from both sides' step times.

Each side runs in its own process, once per thread setting (--threads, default 1 and 2): roll with every role
pinned to N threads (each role's system_envs.OMP_NUM_THREADS = N, and the driver's), TRL with
torch.set_num_threads(N); roll also runs once at its shipped setting, "auto" (roll.pipeline.core.concurrency:
a phase that runs alone gets the node's cores, phases at once share them). A side's best setting is its lowest
median seconds per step over the seeds.

Start-up, both sides alike: "process" = from the child process's start (interpreter, imports, model load,
roll's Ray and roles; roll starts Ray while it checks the config, as the launcher does) to the first step
ready; "in-process" = from building the trainer (roll: RLVRPipeline(config); TRL: GRPOTrainer(...), the model
already loaded) to ready.

Prints per setting and seed: start-up, seconds per step (median), held-out accuracy curve; then one
Markdown table (medians over the seeds) with the ratios roll / TRL thread-matched and at each side's best
setting, ready to paste into docs/results.md.
Settings that cannot be matched exactly are listed in docs/results.md.
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

ROOT = Path(__file__).resolve().parent.parent
BARS = (0.5, 0.7)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--max_steps", type=int, default=60)
    p.add_argument("--eval_steps", type=int, default=10)
    p.add_argument("--data_dir", default=None, help="demo folder (default: a temporary folder per seed)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread settings run for both sides")
    p.add_argument("--no_auto", dest="auto", action="store_false", help="skip roll's shipped per-phase threads")
    p.add_argument("--roll_overrides", nargs="*", default=[], help="extra Hydra overrides for roll's config")
    p.add_argument(
        "--hidden_size", type=int, default=None, help="the demo model's hidden size (default: the demo's, 64)"
    )
    p.add_argument("--side", choices=["roll", "trl"], help=argparse.SUPPRESS)  # child process
    p.add_argument("--child_threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---- shared ---------------------------------------------------------------------------------------------
def demo_settings():
    from roll.demo.rlvr import DemoSettings

    return DemoSettings()


def read_rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def matched_dataset(tokenizer, config, train_rows: list[dict]):
    """TRL's dataset of the rows roll trains on: prompts longer than prompt_length dropped (roll's data loader
    drops them), each prompt checked to render through TRL's chat-template helper to the token ids roll's data
    loader gives."""
    from datasets import Dataset
    from trl.data_utils import maybe_apply_chat_template

    from roll.demo.rlvr import encode_prompts

    encoded = encode_prompts(tokenizer, [r["prompt"] for r in train_rows])
    kept = [(r, ids) for r, ids in zip(train_rows, encoded) if len(ids) <= config.prompt_length]
    for row, ours in kept:
        text = maybe_apply_chat_template({"prompt": [{"role": "user", "content": row["prompt"]}]}, tokenizer)["prompt"]
        if tokenizer(text, add_special_tokens=False)["input_ids"] != ours:
            raise SystemExit(f"vs_trl: TRL's prompt for {row['prompt']!r} differs from roll's: {text!r}")
    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["prompt"]}], "ground_truth": r["ground_truth"]} for r, _ in kept]
    )


def math_reward(completions, ground_truth, **_):
    """TRL's reward function: roll's math rule (math-verify) on each completion."""
    from roll.utils.math_grader import grade_math

    return [grade_math(c[0]["content"], truth) for c, truth in zip(completions, ground_truth)]


def matched_grpo_settings(config, seed: int, generations: int) -> tuple[dict, int]:
    """GRPOConfig keyword arguments with roll's settings of `config` (sampling, loss, KL, optimizer), for
    `generations` generation steps; and the optimizer steps per generation (TRL counts optimizer steps)."""
    train, infer = config.actor_train, config.actor_infer
    samples = config.rollout_batch_size * config.num_return_sequences_in_group
    micro = train.training_args.per_device_train_batch_size
    if train.training_args.gradient_accumulation_steps != 1 or samples % micro:
        raise SystemExit("vs_trl maps one optimizer step to one micro-batch; keep gradient_accumulation_steps 1")
    optimizer_steps = samples // micro  # per generation
    settings = dict(
        seed=seed,
        max_steps=generations * optimizer_steps,
        learning_rate=train.training_args.learning_rate,
        lr_scheduler_type=train.training_args.lr_scheduler_type,
        warmup_steps=train.training_args.warmup_steps,
        weight_decay=train.training_args.weight_decay,
        adam_beta1=train.training_args.adam_beta1,
        adam_beta2=train.training_args.adam_beta2,
        adam_epsilon=train.training_args.adam_epsilon,
        max_grad_norm=train.training_args.max_grad_norm,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=1,
        steps_per_generation=optimizer_steps,
        num_generations=config.num_return_sequences_in_group,
        num_iterations=config.ppo_epochs,
        max_completion_length=infer.generating_args.max_new_tokens,
        temperature=infer.generating_args.temperature,
        top_k=infer.generating_args.top_k,
        top_p=infer.generating_args.top_p,
        beta=config.kl_loss_coef if config.use_kl_loss else 0.0,  # TRL's KL term is k3 = our low_var_kl
        epsilon=config.pg_clip,
        loss_type="bnpo",  # token-mean over the optimizer step's samples = loss_agg_mode token-mean
        scale_rewards="group",  # GRPO: (r - group mean) / group std
        gradient_checkpointing=not train.model_args.disable_gradient_checkpointing,
    )
    return settings, optimizer_steps


def roll_config(data_dir: str, seed: int, max_steps: int, eval_steps: int, output_dir: str, extra=(), start_ray=False):
    """The demo config for this run; `start_ray`: start the local Ray while it is checked, as the launcher does."""
    from roll.cli import load_while_ray_starts
    from roll.configs import compose_config
    from roll.pipeline.rlvr.config import load_rlvr_config

    overrides = [
        f"model_path={data_dir}/model",
        f"actor_train.data_args.file_name={data_dir}/train.jsonl",
        f"validation.data_args.file_name={data_dir}/heldout.jsonl",
        f"seed={seed}",
        f"max_steps={max_steps}",
        f"eval_steps={eval_steps}",
        f"output_dir={output_dir}",
        "track_with=stdout",
        *extra,
    ]
    composed = compose_config(str(ROOT / "examples/tiny_rlvr"), "rlvr_tiny", overrides)
    return load_while_ray_starts(load_rlvr_config, composed) if start_ray else load_rlvr_config(composed)


# ---- roll (child process) -------------------------------------------------------------------------------
def run_roll(args, data_dir: str) -> dict:
    from roll.pipeline.rlvr.pipeline import RLVRPipeline
    from roll.utils.progress import process_age

    n = args.child_threads  # 0: roll's shipped per-phase threads; N: every role pinned to N threads
    roles = ("actor_train", "actor_infer", "reference", "rewards.math")
    threads = [f"++{role}.system_envs.OMP_NUM_THREADS='{n}'" for role in roles] if n else []
    with tempfile.TemporaryDirectory() as output_dir:
        config = roll_config(
            data_dir, args.seed, args.max_steps, args.eval_steps, output_dir, threads + args.roll_overrides, True
        )
        eval_seconds = {}
        validate = RLVRPipeline.validate

        def timed_validate(self, step):
            started = time.perf_counter()
            out = validate(self, step)
            eval_seconds[step] = time.perf_counter() - started
            return out

        RLVRPipeline.validate = timed_validate  # evaluation time is excluded from the step times
        started = time.perf_counter()
        pipeline = RLVRPipeline(config)
        with pipeline:
            startup, process_startup = time.perf_counter() - started, process_age()
            history = pipeline.run()
    curve = {0: history["before"]["val/score/all"]}
    step_seconds = []
    phases: dict = {}
    for step, metrics in sorted(history["steps"].items()):
        step_seconds.append(metrics["timing/step"] - eval_seconds.get(step + 1, 0.0))
        if "val/score/all" in metrics:
            curve[step + 1] = metrics["val/score/all"]
        for key, value in metrics.items():
            if key.startswith("timing/") and key != "timing/step":
                phases.setdefault(key.removeprefix("timing/"), []).append(value)
    return {
        "startup": startup,  # starting the roles; the first weight sync counts as step 1's
        "process_startup": process_startup,
        "step_seconds": step_seconds,
        "curve": curve,
        "phases": {k: statistics.median(v) for k, v in phases.items()},
        "threads": f"{n} per worker (each role's system_envs.OMP_NUM_THREADS)" if n else "auto (per phase)",
    }


# ---- TRL (child process) --------------------------------------------------------------------------------
def run_trl(args, data_dir: str) -> dict:
    import torch

    torch.set_num_threads(args.child_threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from roll.demo.rlvr import greedy_eval

    config = roll_config(data_dir, args.seed, args.max_steps, args.eval_steps, "/tmp/unused")
    infer = config.actor_infer
    model_dir = config.actor_train.model_args.model_name_or_path
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    heldout = read_rows(f"{data_dir}/heldout.jsonl")
    dataset = matched_dataset(tokenizer, config, read_rows(f"{data_dir}/train.jsonl"))
    settings, optimizer_steps = matched_grpo_settings(config, args.seed, args.max_steps)
    trl_args = GRPOConfig(
        **settings,
        output_dir=tempfile.mkdtemp(prefix="vs_trl_"),
        use_cpu=True,
        bf16=False,
        logging_steps=10**9,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    timings = {"eval": {}, "steps": []}

    class Clock(TrainerCallback):
        """Generation-step times (every optimizer_steps optimizer steps) and greedy held-out evaluation."""

        def __init__(self):
            self.last = None

        def on_train_begin(self, *_, **__):
            self.last = time.perf_counter()

        def on_step_end(self, _args, state, _control, model=None, **__):
            if state.global_step % optimizer_steps:
                return
            now = time.perf_counter()
            timings["steps"].append(now - self.last)
            step = state.global_step // optimizer_steps
            if step % args.eval_steps == 0 or step == args.max_steps:
                timings["eval"][step] = greedy_eval(model, tokenizer, heldout, infer.generating_args.max_new_tokens)[
                    "accuracy"
                ]
            self.last = time.perf_counter()

    started = time.perf_counter()
    trainer = GRPOTrainer(
        model=model, reward_funcs=math_reward, args=trl_args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.add_callback(Clock())
    startup = time.perf_counter() - started
    from roll.utils.progress import process_age

    process_startup = process_age()
    before = greedy_eval(trainer.model, tokenizer, heldout, infer.generating_args.max_new_tokens)["accuracy"]
    trainer.train()
    return {
        "startup": startup,
        "process_startup": process_startup,
        "step_seconds": timings["steps"],
        "curve": {0: before, **timings["eval"]},
        "phases": {},
        "threads": f"{args.child_threads} (torch.set_num_threads)",
    }


# ---- parent ---------------------------------------------------------------------------------------------
def child(side: str, seed: int, data_dir: str, args, threads: int) -> dict:
    command = [sys.executable, __file__, "--side", side, "--seed", str(seed), "--data_dir", data_dir]
    command += [
        "--child_threads",
        str(threads),
        "--max_steps",
        str(args.max_steps),
        "--eval_steps",
        str(args.eval_steps),
    ]
    if args.roll_overrides:
        command += ["--roll_overrides", *args.roll_overrides]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads or 1), "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-5000:] + done.stderr[-5000:])
        raise SystemExit(
            f"vs_trl: the {side} run (seed {seed}, {threads} threads) failed with exit code {done.returncode}"
        )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall"] = time.perf_counter() - started
    result["curve"] = {int(k): v for k, v in result["curve"].items()}
    return result


def time_to(result: dict, bar: float) -> float | None:
    """Training seconds until the first evaluation at or above `bar`."""
    for step, accuracy in sorted(result["curve"].items()):
        if accuracy >= bar:
            return sum(result["step_seconds"][:step])
    return None


def fmt(value, unit="s"):
    return "not reached" if value is None else f"{value:.1f} {unit}"


def print_run(side: str, threads: int, seed: int, r: dict) -> None:
    curve = "  ".join(f"{s}:{a:.2f}" for s, a in sorted(r["curve"].items()))
    print(
        f"{side:>4} {threads or 'auto'} thread(s), seed {seed}: "
        f"{statistics.median(r['step_seconds']):.3f} s/step (median); "
        f"start-up {r['process_startup']:.1f} s process, {r['startup']:.1f} s in-process"
    )
    print(f"      held-out greedy accuracy by step: {curve}")
    print("      time to held-out " + ", ".join(f"{bar}: {fmt(time_to(r, bar))}" for bar in BARS) + " of training")
    if r["phases"]:
        print("      median phase seconds: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(r["phases"].items())))


def summarize(runs: dict) -> dict:
    """(side, threads) → medians over the seeds: s/step (of each seed's median), start-ups, final accuracies."""
    out = {}
    for key, results in runs.items():
        per_seed = [statistics.median(r["step_seconds"]) for r in results]
        out[key] = {
            "s_per_step": statistics.median(per_seed),
            "per_seed": per_seed,
            "process": statistics.median(r["process_startup"] for r in results),
            "in_process": statistics.median(r["startup"] for r in results),
            "final": [r["curve"][max(r["curve"])] for r in results],
        }
    return out


def table(summary: dict, threads: list[int]) -> str:
    """The Markdown table for docs/results.md: every setting, then the ratios."""
    lines = [
        "| side, threads | s/step (median of seeds) | s/step per seed | start-up, process | start-up, in-process "
        "| held-out at the end, per seed |",
        "|---|---|---|---|---|---|",
    ]
    settings = {side: [n for n in [0, *threads] if (side, n) in summary] for side in SIDES}
    for side in SIDES:
        for n in settings[side]:
            s = summary[(side, n)]
            lines.append(
                f"| {side}, {n or 'auto'} | {s['s_per_step']:.3f} | {' / '.join(f'{v:.3f}' for v in s['per_seed'])} | "
                f"{s['process']:.1f} s | {s['in_process']:.1f} s | {' / '.join(f'{v:.2f}' for v in s['final'])} |"
            )
    best = {side: min(settings[side], key=lambda n: summary[(side, n)]["s_per_step"]) for side in SIDES}
    pairs = [(f"{n} thread(s) each", n, n) for n in threads]
    if ("roll", 0) in summary:
        pairs += [(f"roll auto, TRL {n}", 0, n) for n in threads]
    pairs.append((f"each at its best (roll {best['roll'] or 'auto'}, TRL {best['TRL']})", best["roll"], best["TRL"]))
    lines += ["", "| roll / TRL | s/step | start-up, process | start-up, in-process |", "|---|---|---|---|"]
    for label, ours, theirs in pairs:
        a, b = summary[("roll", ours)], summary[("TRL", theirs)]
        lines.append(
            f"| {label} | {a['s_per_step'] / b['s_per_step']:.2f} | {a['process'] / b['process']:.2f} | "
            f"{a['in_process'] / b['in_process']:.2f} |"
        )
    return "\n".join(lines)


SIDES = ("roll", "TRL")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.side:  # child: run one side, print one JSON line
        result = run_roll(args, args.data_dir) if args.side == "roll" else run_trl(args, args.data_dir)
        print(json.dumps(result))
        return
    try:
        import trl
    except ImportError:
        raise SystemExit("vs_trl needs TRL: pip install 'roll[trl]'") from None
    from roll.demo.rlvr import prepare_demo

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    began, loads = time.perf_counter(), [os.getloadavg()[0]]
    print(
        f"vs_trl at commit {commit.stdout.strip() or '?'}; TRL {trl.__version__}; {os.cpu_count()} CPUs; seeds "
        f"{args.seeds}; {args.max_steps} steps; threads {args.threads}; hidden size "
        f"{args.hidden_size or demo_settings().hidden_size}; load average {loads[0]:.2f}",
        flush=True,
    )
    runs: dict = {}
    for seed in args.seeds:
        size = f"_h{args.hidden_size}" if args.hidden_size else ""
        data_dir = args.data_dir or str(Path(tempfile.gettempdir()) / f"vs_trl_demo{size}_s{seed}")
        settings = demo_settings()
        hidden = {"hidden_size": args.hidden_size} if args.hidden_size else {}
        prepare_demo(data_dir, type(settings)(**{**settings.__dict__, "seed": seed, **hidden}))
        turns = [("roll", "roll", 0)] if args.auto else []
        for threads in args.threads:  # the two sides in turn, so that a change of load falls on both
            turns += [("roll", "roll", threads), ("trl", "TRL", threads)]
        for side, name, threads in turns:
            result = child(side, seed, data_dir, args, threads)
            runs.setdefault((name, threads), []).append(result)
            print_run(name, threads, seed, result)
            loads.append(os.getloadavg()[0])
            sys.stdout.flush()
    minutes, seconds = divmod(int(time.perf_counter() - began), 60)
    print(
        f"\n{len(args.seeds)} seed(s) x {len(args.threads)} thread setting(s) x 2 sides (+ roll auto) in "
        f"{minutes} min {seconds} s; "
        f"load average {min(loads):.2f}-{max(loads):.2f}; medians over the seeds:\n"
    )
    print(table(summarize(runs), args.threads))


if __name__ == "__main__":
    main()
