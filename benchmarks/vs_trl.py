"""roll against TRL's GRPOTrainer on the embedded demo, one after the other on this machine.

    pip install 'roll[trl]'                     # TRL is only a benchmark dependency
    python benchmarks/vs_trl.py [--seeds 0 1 2] [--max_steps 60] [--eval_steps 10]

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

Each side runs in its own process (its own thread settings). roll uses its shipped setting, one thread per
worker (Ray workers for trainer, rollout, reference and reward); TRL is first run for --probe_steps steps
at 1 and at 2 threads, twice each in turn, and then measured at the faster one (best of its two rounds).

Prints per side and seed: start-up seconds, seconds per step (median), held-out accuracy curve, time to
held-out accuracy 0.5 and 0.7 (training time only, and with start-up), and the ratios roll / TRL.
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
    p.add_argument("--trl_threads", type=int, default=None, help="skip the probe and use this many threads")
    p.add_argument("--probe_steps", type=int, default=8)
    p.add_argument("--roll_overrides", nargs="*", default=[], help="extra Hydra overrides for roll's config")
    p.add_argument("--side", choices=["roll", "trl"], help=argparse.SUPPRESS)  # child process
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---- shared ---------------------------------------------------------------------------------------------
def demo_settings():
    from roll.demo.rlvr import DemoSettings

    return DemoSettings()


def read_rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def roll_config(data_dir: str, seed: int, max_steps: int, eval_steps: int, output_dir: str, extra=()):
    from roll.configs import compose_config, load_rlvr_config

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
    return load_rlvr_config(compose_config(str(ROOT / "examples/tiny_rlvr"), "rlvr_tiny", overrides))


# ---- roll (child process) -------------------------------------------------------------------------------
def run_roll(args, data_dir: str) -> dict:
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    with tempfile.TemporaryDirectory() as output_dir:
        config = roll_config(data_dir, args.seed, args.max_steps, args.eval_steps, output_dir, args.roll_overrides)
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
            startup = time.perf_counter() - started
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
        "step_seconds": step_seconds,
        "curve": curve,
        "phases": {k: statistics.median(v) for k, v in phases.items()},
        "threads": f"{config.system_envs.get('OMP_NUM_THREADS', '1')} per worker (system_envs.OMP_NUM_THREADS)",
    }


# ---- TRL (child process) --------------------------------------------------------------------------------
def run_trl(args, data_dir: str) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from roll.demo.rlvr import encode_prompts, greedy_eval
    from roll.utils.math_grader import grade_math

    config = roll_config(data_dir, args.seed, args.max_steps, args.eval_steps, "/tmp/unused")
    train, infer = config.actor_train, config.actor_infer
    samples = config.rollout_batch_size * config.num_return_sequences_in_group
    micro = train.training_args.per_device_train_batch_size
    if train.training_args.gradient_accumulation_steps != 1 or samples % micro:
        raise SystemExit("vs_trl maps one optimizer step to one micro-batch; keep gradient_accumulation_steps 1")
    optimizer_steps = samples // micro  # per generation
    model_dir = config.actor_train.model_args.model_name_or_path
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    train_rows = read_rows(f"{data_dir}/train.jsonl")
    heldout = read_rows(f"{data_dir}/heldout.jsonl")
    # roll drops prompts longer than prompt_length: the same rows here
    lengths = [len(ids) for ids in encode_prompts(tokenizer, [r["prompt"] for r in train_rows])]
    train_rows = [r for r, n in zip(train_rows, lengths) if n <= config.prompt_length]
    # the prompts TRL renders (its chat-template helper) are the token ids roll's data loader gives
    from trl.data_utils import maybe_apply_chat_template

    for row, ours in zip(train_rows, encode_prompts(tokenizer, [r["prompt"] for r in train_rows])):
        text = maybe_apply_chat_template({"prompt": [{"role": "user", "content": row["prompt"]}]}, tokenizer)["prompt"]
        if tokenizer(text, add_special_tokens=False)["input_ids"] != ours:
            raise SystemExit(f"vs_trl: TRL's prompt for {row['prompt']!r} differs from roll's: {text!r}")
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["prompt"]}], "ground_truth": r["ground_truth"]} for r in train_rows]
    )

    def reward(completions, ground_truth, **_):
        return [grade_math(c[0]["content"], truth) for c, truth in zip(completions, ground_truth)]

    trl_args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="vs_trl_"),
        use_cpu=True,
        seed=args.seed,
        max_steps=args.max_steps * optimizer_steps,
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
        gradient_checkpointing=False,
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
        model=model, reward_funcs=reward, args=trl_args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.add_callback(Clock())
    startup = time.perf_counter() - started
    before = greedy_eval(trainer.model, tokenizer, heldout, infer.generating_args.max_new_tokens)["accuracy"]
    trainer.train()
    return {
        "startup": startup,
        "step_seconds": timings["steps"],
        "curve": {0: before, **timings["eval"]},
        "phases": {},
        "threads": f"{args.threads} (torch.set_num_threads)",
    }


# ---- parent ---------------------------------------------------------------------------------------------
def child(side: str, seed: int, data_dir: str, args, threads: int, max_steps: int) -> dict:
    command = [
        sys.executable,
        __file__,
        "--side",
        side,
        "--seed",
        str(seed),
        "--data_dir",
        data_dir,
        "--threads",
        str(threads),
        "--max_steps",
        str(max_steps),
        "--eval_steps",
        str(args.eval_steps),
    ]
    if args.roll_overrides:
        command += ["--roll_overrides", *args.roll_overrides]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-5000:] + done.stderr[-5000:])
        raise SystemExit(f"vs_trl: the {side} run (seed {seed}) failed with exit code {done.returncode}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall"] = time.perf_counter() - started
    result["curve"] = {int(k): v for k, v in result["curve"].items()}
    return result


def time_to(result: dict, bar: float) -> tuple[float | None, float | None]:
    """(training seconds, seconds with start-up) until the first evaluation at or above `bar`."""
    for step, accuracy in sorted(result["curve"].items()):
        if accuracy >= bar:
            training = sum(result["step_seconds"][:step])
            return training, training + result["startup"]
    return None, None


def fmt(value, unit="s"):
    return "not reached" if value is None else f"{value:.1f} {unit}"


def report(seed: int, ours: dict, trl: dict) -> dict:
    print(f"\n=== seed {seed} ===")
    summary = {}
    for name, r in (("roll", ours), ("TRL", trl)):
        per_step = statistics.median(r["step_seconds"])
        curve = "  ".join(f"{s}:{a:.2f}" for s, a in sorted(r["curve"].items()))
        print(f"{name:>4}: threads {r['threads']}; start-up {r['startup']:.1f} s; {per_step:.2f} s/step (median)")
        print(f"      held-out greedy accuracy by step: {curve}")
        if r["phases"]:
            print("      median phase seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["phases"].items())))
        summary[name] = {"s_per_step": per_step}
        for bar in BARS:
            training, total = time_to(r, bar)
            print(f"      time to held-out {bar}: {fmt(training)} of training ({fmt(total)} with start-up)")
            summary[name][bar] = (training, total)
    ratio = summary["roll"]["s_per_step"] / summary["TRL"]["s_per_step"]
    print(f"ratio roll / TRL: seconds per step {ratio:.2f}")
    for bar in BARS:
        (a, a_total), (b, b_total) = summary["roll"][bar], summary["TRL"][bar]
        if a is not None and b is not None:
            print(f"ratio roll / TRL: time to {bar}: {a / b:.2f} (training), {a_total / b_total:.2f} (with start-up)")
        else:
            print(f"ratio roll / TRL: time to {bar}: n/a (roll {fmt(a)}, TRL {fmt(b)})")
    return summary


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

    print(f"TRL {trl.__version__}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    threads, summaries = args.trl_threads, []
    for seed in args.seeds:
        data_dir = args.data_dir or str(Path(tempfile.gettempdir()) / f"vs_trl_demo_s{seed}")
        settings = demo_settings()
        prepare_demo(data_dir, type(settings)(**{**settings.__dict__, "seed": seed}))
        if threads is None:  # once, on the first seed
            # two interleaved rounds, best of each: one short probe was seen to pick 1 thread by noise
            probe = {1: float("inf"), 2: float("inf")}
            for n in (1, 2, 1, 2):
                steps = child("trl", seed, data_dir, args, n, args.probe_steps)["step_seconds"]
                probe[n] = min(probe[n], statistics.median(steps))
            threads = min(probe, key=probe.get)
            print(
                f"TRL thread probe (best of 2 rounds of {args.probe_steps} steps): "
                + ", ".join(f"{n} thread(s) {s:.2f} s/step" for n, s in probe.items())
                + f" -> {threads}"
            )
        ours = child("roll", seed, data_dir, args, 1, args.max_steps)
        theirs = child("trl", seed, data_dir, args, threads, args.max_steps)
        print(f"load average {os.getloadavg()[0]:.2f}", end="")
        summaries.append(report(seed, ours, theirs))
    if len(summaries) > 1:
        print("\n=== all seeds ===")
        for name in ("roll", "TRL"):
            per_step = [s[name]["s_per_step"] for s in summaries]
            print(f"{name:>4}: s/step {', '.join(f'{v:.2f}' for v in per_step)}")
            for bar in BARS:
                print(
                    f"      time to {bar} (training / with start-up): "
                    + ", ".join(f"{fmt(s[name][bar][0])} / {fmt(s[name][bar][1])}" for s in summaries)
                )


if __name__ == "__main__":
    main()
