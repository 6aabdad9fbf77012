"""Learnability probe for the embedded RLVR demo: the pipeline's GRPO loop without Ray or DeepSpeed.

Mimics one RLVRPipeline step per iteration, in one process with plain torch + transformers:
  rollout_batch_size prompts x num_return_sequences_in_group samples (HF generate, temperature T,
  top_k 0 / top_p 1, fixed left-padded prompt_length) -> 0/1 math-verify rewards on the last token ->
  old log-probs by a forward pass -> GRPO advantages (roll.algorithms) -> ppo_epochs shuffled passes
  in mini-batches of per_device_train_batch_size x gradient_accumulation_steps rows, vanilla PPO-clip
  loss, token-mean (roll.algorithms), grad-norm clip, one AdamW step per mini-batch.
Greedy held-out accuracy (math-verify) is measured before, every --eval_steps, and after.

    OMP_NUM_THREADS=1 python benchmarks/demo_learnability.py --data_dir /tmp/demo_s0 --seed 0
    OMP_NUM_THREADS=1 python benchmarks/demo_learnability.py --seeds 0 1 2     # robustness, one line each

The demo folder is prepared (roll.demo.rlvr.prepare_demo) when missing or prepared differently.
"""

import argparse
import json
import os
import random
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from roll.algorithms import (
    PolicyLossConfig,
    agg_loss,
    compute_entropy_loss,
    compute_grpo_outcome_advantage,  # noqa: E402
    compute_policy_loss_vanilla,
    kl_penalty,
)
from roll.demo.rlvr import DemoSettings, encode_prompts, greedy_eval, load_model, prepare_demo  # noqa: E402
from roll.demo.task import read_jsonl  # noqa: E402
from roll.utils.math_grader import grade  # noqa: E402


def parse_args(argv=None):
    d = DemoSettings()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_dir", default=None, help="demo folder (default /tmp/demo_probe/s<seed>_<model>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, nargs="*", help="run each seed in turn (own demo folder each)")
    # demo preparation
    p.add_argument("--hidden_size", type=int, default=d.hidden_size)
    p.add_argument("--num_layers", type=int, default=d.num_layers)
    p.add_argument("--num_heads", type=int, default=d.num_heads)
    p.add_argument("--unbalanced", action="store_true", help="keep the natural (triangular) answer mix")
    p.add_argument("--warm_start", default=d.warm_start, choices=["reading", "mixed", "random"])
    p.add_argument("--warm_start_steps", type=int, default=d.warm_start_steps)
    p.add_argument("--warm_start_lr", type=float, default=d.warm_start_lr)
    # RL
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--rollout_batch_size", type=int, default=32)
    p.add_argument("--num_return_sequences_in_group", type=int, default=8)
    p.add_argument("--prompt_length", type=int, default=24)
    p.add_argument("--max_new_tokens", type=int, default=6)
    p.add_argument("--temperature", type=float, default=1.5)
    p.add_argument("--ppo_epochs", type=int, default=2)
    p.add_argument("--per_device_train_batch_size", type=int, default=32)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    p.add_argument("--clip_ratio", type=float, default=0.2)
    p.add_argument("--max_grad_norm", type=float, default=1.0)
    p.add_argument("--lr_scheduler_type", default="cosine", choices=["constant", "linear", "cosine"])
    p.add_argument("--warmup_steps", type=int, default=0)
    p.add_argument("--adam_eps", type=float, default=1e-8)
    p.add_argument("--adam_beta2", type=float, default=0.999)
    p.add_argument("--kl_loss_coef", type=float, default=0.05, help="> 0: use_kl_loss against the initial model")
    p.add_argument("--kl_loss_type", default="low_var_kl")
    p.add_argument("--entropy_loss_coef", type=float, default=0.0)
    p.add_argument("--weight_decay", type=float, default=0.0)
    p.add_argument("--max_steps", type=int, default=60)
    p.add_argument("--eval_steps", type=int, default=10)
    p.add_argument("--max_rl_seconds", type=float, default=None, help="stop early after this much RL time")
    p.add_argument("--fact_table", action="store_true", help="print each fact's greedy answers at every eval")
    p.add_argument("--json", action="store_true", help="print one JSON result line per seed")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def demo_settings(args, seed: int) -> DemoSettings:
    return DemoSettings(
        seed=seed,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        balance_answers=not args.unbalanced,
        warm_start=args.warm_start,
        warm_start_steps=args.warm_start_steps,
        warm_start_lr=args.warm_start_lr,
    )


def response_log_probs(model, input_ids, attention_mask, responses, prompt_length, temperature):
    """The contract's log-probs: logits[:, P-1 : P+R-1] / T -> log_softmax -> gather(responses)."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logits = logits[:, prompt_length - 1 : prompt_length - 1 + responses.shape[1]].float() / temperature
    return torch.gather(logits.log_softmax(-1), -1, responses.unsqueeze(-1)).squeeze(-1), logits


class Sampler:
    """Shuffled epochs over the training rows (as roll.data.prompts.PromptSampler)."""

    def __init__(self, rows, seed):
        self.rows, self.seed, self.epoch, self.order = rows, seed, 0, []

    def next_rows(self, count):
        out = []
        while len(out) < count:
            if not self.order:
                self.order = np.random.default_rng(self.seed + self.epoch).permutation(len(self.rows)).tolist()
                self.epoch += 1
            out.append(self.rows[self.order.pop(0)])
        return out


def collate(tokenizer, rows, prompt_length):
    ids_list = encode_prompts(tokenizer, [r["prompt"] for r in rows])
    too_long = max(len(x) for x in ids_list)
    if too_long > prompt_length:
        raise ValueError(f"prompt of {too_long} tokens > prompt_length {prompt_length}")
    ids = torch.full((len(rows), prompt_length), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, x in enumerate(ids_list):
        ids[i, prompt_length - len(x) :] = torch.tensor(x)
        mask[i, prompt_length - len(x) :] = 1
    return ids, mask


def rl_step(model, tokenizer, optimizer, scheduler, rows, step, args, eos, pad, reference=None):
    timings = {}
    t0 = time.perf_counter()
    B, n, P, R = len(rows), args.num_return_sequences_in_group, args.prompt_length, args.max_new_tokens
    prompts, prompt_mask = collate(tokenizer, rows, P)
    torch.manual_seed(args.seed * 100003 + step)
    model.eval()
    with torch.no_grad():
        out = model.generate(
            input_ids=prompts,
            attention_mask=prompt_mask,
            do_sample=True,
            temperature=args.temperature,
            top_k=0,
            top_p=1.0,
            num_return_sequences=n,
            max_new_tokens=R,
            eos_token_id=eos,
            pad_token_id=pad,
        )
    gen = out[:, P:]
    responses = torch.full((B * n, R), pad, dtype=torch.long)
    responses[:, : gen.shape[1]] = gen
    is_eos = (responses == eos).long()
    response_mask = (((is_eos.cumsum(-1) - is_eos) == 0) & (torch.arange(R) < gen.shape[1])).float()
    responses[response_mask == 0] = pad
    prompts, prompt_mask = prompts.repeat_interleave(n, 0), prompt_mask.repeat_interleave(n, 0)
    input_ids = torch.cat([prompts, responses], 1)
    attention_mask = torch.cat([prompt_mask, response_mask.long()], 1)
    timings["generate"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    truths = [r["ground_truth"] for r in rows for _ in range(n)]
    scores = torch.tensor([grade(t, g) for t, g in zip(texts, truths)])
    token_scores = torch.zeros_like(response_mask)
    last = (response_mask.sum(-1).long() - 1).clamp(min=0)
    token_scores[torch.arange(B * n), last] = scores
    timings["reward_time"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with torch.no_grad():
        old_log_probs, _ = response_log_probs(model, input_ids, attention_mask, responses, P, args.temperature)
    timings["old_log_probs"] = time.perf_counter() - t0
    if reference is not None:
        t0 = time.perf_counter()
        with torch.no_grad():
            ref_log_probs, _ = response_log_probs(reference, input_ids, attention_mask, responses, P, args.temperature)
        timings["ref_log_probs"] = time.perf_counter() - t0
    uids = np.array([f"{step}-{i}" for i in range(B) for _ in range(n)], dtype=object)
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=token_scores, response_mask=response_mask, index=uids
    )

    t0 = time.perf_counter()
    model.train()
    mini = args.per_device_train_batch_size * args.gradient_accumulation_steps
    if (B * n) % mini:
        raise ValueError(f"rollout rows {B * n} are not a multiple of the mini-batch {mini}")
    rng = np.random.default_rng(args.seed * 7919 + step)
    metrics = {"pg_loss": [], "clipfrac": [], "ppo_kl": [], "grad_norm": []}
    for _ in range(args.ppo_epochs):
        order = torch.as_tensor(rng.permutation(B * n))
        for m in range(0, B * n, mini):
            for u in range(m, m + mini, args.per_device_train_batch_size):
                idx = order[u : u + args.per_device_train_batch_size]
                log_probs, logits = response_log_probs(
                    model, input_ids[idx], attention_mask[idx], responses[idx], P, args.temperature
                )
                loss, pm = compute_policy_loss_vanilla(
                    old_log_probs[idx],
                    log_probs,
                    advantages[idx],
                    response_mask[idx],
                    loss_agg_mode="token-mean",
                    config=PolicyLossConfig(
                        clip_ratio=args.clip_ratio, clip_ratio_low=args.clip_ratio, clip_ratio_high=args.clip_ratio
                    ),
                )
                if reference is not None:
                    kl = kl_penalty(log_probs, ref_log_probs[idx], args.kl_loss_type)
                    loss = loss + args.kl_loss_coef * agg_loss(kl, response_mask[idx], "token-mean")
                if args.entropy_loss_coef:
                    loss = loss - args.entropy_loss_coef * compute_entropy_loss(
                        logits, response_mask[idx], "token-mean"
                    )
                (loss / args.gradient_accumulation_steps).backward()
                metrics["pg_loss"].append(loss.item())
                metrics["clipfrac"].append(pm["pg_clipfrac"])
                metrics["ppo_kl"].append(pm["ppo_kl"])
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            metrics["grad_norm"].append(float(norm))
    timings["train"] = time.perf_counter() - t0
    result = {k: float(np.mean(v)) for k, v in metrics.items()}
    result.update(
        reward=scores.mean().item(),
        response_length=response_mask.sum(-1).mean().item(),
        solved_groups=float((scores.view(B, n).max(-1).values > 0).float().mean()),
        **timings,
    )
    return result


def fact_table(rows, replies) -> str:
    """'a+b=greedy answers' per fact, e.g. '3+4:7' or '3+4:3x9,4x3' when phrasings disagree."""
    from collections import Counter, defaultdict

    by_fact = defaultdict(Counter)
    for row, reply in zip(rows, replies):
        a, b = [w for w in row["prompt"].split() if w.isdigit()]
        answer = reply.strip()
        answer = answer[len("\\boxed{") : answer.index("}")] if answer.startswith("\\boxed{") and "}" in answer else "?"
        by_fact[f"{a}+{b}"][answer] += 1
    cells = []
    for fact, counts in sorted(by_fact.items()):
        right = str(sum(int(x) for x in fact.split("+")))
        body = ",".join(f"{ans}x{n}" if len(counts) > 1 else ans for ans, n in counts.most_common())
        cells.append(f"{fact}:{body}{'' if counts.most_common(1)[0][0] == right else '!'}")
    return " ".join(cells)


def run(args, seed: int) -> dict:
    args = argparse.Namespace(**vars(args))
    args.seed = seed
    random.seed(seed)
    np.random.seed(seed)
    settings = demo_settings(args, seed)
    data_dir = args.data_dir or (
        f"/tmp/demo_probe/s{seed}_h{args.hidden_size}l{args.num_layers}"
        f"a{args.num_heads}{'_u' if args.unbalanced else ''}"
        f"_{args.warm_start}{args.warm_start_steps}_{args.warm_start_lr:g}"
    )
    t0 = time.perf_counter()
    summary = prepare_demo(data_dir, settings, log=lambda *_: None)
    prep_seconds = time.perf_counter() - t0
    torch.manual_seed(seed)
    model, tokenizer = load_model(f"{data_dir}/model")
    train_rows, heldout = read_jsonl(f"{data_dir}/train.jsonl"), read_jsonl(f"{data_dir}/heldout.jsonl")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, weight_decay=args.weight_decay, eps=args.adam_eps, betas=(0.9, args.adam_beta2)
    )
    from roll.strategies.train_common import lr_lambda  # the trainer's schedule (decays to 0 at the last step)

    optimizer_steps = (
        args.max_steps
        * args.ppo_epochs
        * (
            args.rollout_batch_size
            * args.num_return_sequences_in_group
            // (args.per_device_train_batch_size * args.gradient_accumulation_steps)
        )
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(args.lr_scheduler_type, args.warmup_steps, optimizer_steps)
    )
    reference = None
    if args.kl_loss_coef > 0:
        reference, _ = load_model(f"{data_dir}/model")
        reference.eval()
    sampler = Sampler(train_rows, seed)
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))

    t0 = time.perf_counter()
    before = greedy_eval(model, tokenizer, heldout, args.max_new_tokens)["accuracy"]
    eval_seconds = [time.perf_counter() - t0]
    say(
        f"[seed {seed}] prepared in {prep_seconds:.1f}s ({'cached' if summary['skipped'] else 'new'}), "
        f"held-out greedy accuracy before RL: {100 * before:.1f}%"
    )
    curve, step_times, rl_seconds, rl_cpu_seconds, step = [(0, before)], [], 0.0, 0.0, 0
    for step in range(args.max_steps):
        t0, c0 = time.perf_counter(), time.process_time()
        m = rl_step(
            model,
            tokenizer,
            optimizer,
            scheduler,
            sampler.next_rows(args.rollout_batch_size),
            step,
            args,
            eos,
            pad,
            reference,
        )
        step_times.append(time.perf_counter() - t0)
        rl_seconds += step_times[-1]
        rl_cpu_seconds += time.process_time() - c0
        last = step == args.max_steps - 1 or (args.max_rl_seconds and rl_seconds >= args.max_rl_seconds)
        line = (
            f"[seed {seed}] step {step:3d} reward {m['reward']:.3f} solved {m['solved_groups']:.2f} "
            f"len {m['response_length']:.1f} pg {m['pg_loss']:+.3f} clip {m['clipfrac']:.3f} "
            f"gnorm {m['grad_norm']:.2f} | {step_times[-1]:.2f}s (gen {m['generate']:.2f} "
            f"rew {m['reward_time']:.2f} old {m['old_log_probs']:.2f} train {m['train']:.2f})"
        )
        if (args.eval_steps and (step + 1) % args.eval_steps == 0) or last:
            t0 = time.perf_counter()
            ev = greedy_eval(model, tokenizer, heldout, args.max_new_tokens)
            acc = ev["accuracy"]
            eval_seconds.append(time.perf_counter() - t0)
            curve.append((step + 1, acc))
            line += f" | held-out {100 * acc:.1f}% ({len(ev['answer_counts'])} distinct answers)"
            if args.fact_table:
                line += (
                    "\n    "
                    + fact_table(heldout, ev["replies"])
                    + "\n    e.g. "
                    + " | ".join(repr(r) for r in ev["replies"][:4])
                )
        say(line)
        if last:
            break
    after = curve[-1][1]
    result = {
        "seed": seed,
        "before": before,
        "after": after,
        "gain_points": 100 * (after - before),
        "steps": step + 1,
        "rl_seconds": round(rl_seconds, 1),
        "seconds_per_step": round(rl_seconds / (step + 1), 3),
        "rl_cpu_seconds": round(rl_cpu_seconds, 1),
        "cpu_seconds_per_step": round(rl_cpu_seconds / (step + 1), 3),
        "first_step_reaching_+40": next((s for s, a in curve if a - before >= 0.4), None),
        "eval_seconds_each": round(float(np.mean(eval_seconds)), 2),
        "curve": [(s, round(100 * a, 1)) for s, a in curve],
    }
    say(
        f"[seed {seed}] held-out greedy accuracy {100 * before:.1f}% -> {100 * after:.1f}% "
        f"({result['gain_points']:+.1f} points) in {result['steps']} steps, RL {rl_seconds:.0f}s "
        f"({result['seconds_per_step']:.2f} s/step; CPU {rl_cpu_seconds:.0f}s, "
        f"{result['cpu_seconds_per_step']:.2f} s/step), eval {result['eval_seconds_each']:.1f}s each"
    )
    return result


def main(argv=None):
    args = parse_args(argv)
    results = [run(args, seed) for seed in (args.seeds if args.seeds else [args.seed])]
    if args.json:
        for r in results:
            print("RESULT " + json.dumps(r))
    if len(results) > 1:
        print(
            "seeds: "
            + "; ".join(
                f"{r['seed']}: {100 * r['before']:.1f}% -> {100 * r['after']:.1f}% "
                f"({r['gain_points']:+.1f}) {r['rl_seconds']:.0f}s"
                for r in results
            )
        )
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
