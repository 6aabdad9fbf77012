"""Cost of rollout IS next to the training step it corrects (docs/rollout_correction.md quotes the result).

One batch of 64 sequences x 1,024 response tokens (right-padded, random lengths). Timed, single thread:
  * seed IS: compute_rollout_importance_weights (token level, truncate, threshold 2.0, all metrics incl.
    percentiles) + compute_mismatch_metrics — what the RLVR driver runs when rollout_is_threshold is set;
  * head rollout correction: compute_rollout_correction_and_rejection_mask (token IS, batch-normalised,
    rejection token_k1 + seq_mean_k3);
  * one forward+backward of compute_policy_loss_vanilla through a tiny Qwen2 built in code (no hub),
    over the same batch in micro-batches of 8 rows with gradient accumulation, as the trainer runs it.
Each is warmed up once, then repeated; medians are reported. The model is deliberately tiny (hidden 64,
2 layers), so the ratio overstates the overhead a real policy would see.

    OMP_NUM_THREADS=1 python benchmarks/rollout_is_overhead.py
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from roll.algorithms import (
    compute_mismatch_metrics,
    compute_policy_loss_vanilla,  # noqa: E402
    compute_rollout_correction_and_rejection_mask,
    compute_rollout_importance_weights,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--response_length", type=int, default=1024)
    p.add_argument("--prompt_length", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--micro_batch", type=int, default=8)
    p.add_argument("--is_repeats", type=int, default=15)
    p.add_argument("--train_repeats", type=int, default=3)
    return p.parse_args(argv)


def median_seconds(fn, repeats):
    fn()  # warm-up: first-call allocations and kernel selection are not what a training step pays
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_batch(args, gen):
    lengths = torch.randint(args.response_length // 4, args.response_length + 1, (args.batch,), generator=gen)
    mask = (torch.arange(args.response_length)[None, :] < lengths[:, None]).float()
    old = -torch.rand(args.batch, args.response_length, generator=gen) * 4
    rollout = old + torch.randn(args.batch, args.response_length, generator=gen) * 0.05  # bf16-like mismatch
    return old, rollout, mask


def build_policy(args):
    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=args.prompt_length + args.response_length,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).train()


def make_train_step(args, model, old, mask, gen):
    prompts = torch.randint(0, args.vocab, (args.batch, args.prompt_length), generator=gen)
    responses = torch.randint(0, args.vocab, (args.batch, args.response_length), generator=gen)
    input_ids = torch.cat([prompts, responses], dim=1)
    attention_mask = torch.cat([torch.ones_like(prompts), mask.long()], dim=1)
    advantages = torch.randn(args.batch, 1, generator=gen).expand_as(mask) * mask
    p = args.prompt_length

    def step():
        model.zero_grad(set_to_none=True)
        chunks = range(0, args.batch, args.micro_batch)
        for start in chunks:
            rows = slice(start, start + args.micro_batch)
            logits = model(input_ids=input_ids[rows], attention_mask=attention_mask[rows]).logits
            log_probs = torch.log_softmax(logits[:, p - 1 : -1].float(), dim=-1)
            log_prob = log_probs.gather(-1, responses[rows].unsqueeze(-1)).squeeze(-1)
            loss, _ = compute_policy_loss_vanilla(old[rows], log_prob, advantages[rows], mask[rows])
            (loss / len(chunks)).backward()

    return step


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    old, rollout, mask = make_batch(args, gen)

    def seed_is():
        compute_rollout_importance_weights(old, rollout, mask, rollout_is_threshold=2.0)
        compute_mismatch_metrics(old, rollout, mask)

    def head_correction():
        compute_rollout_correction_and_rejection_mask(
            old,
            rollout,
            mask,
            rollout_is="token",
            rollout_is_batch_normalize=True,
            rollout_rs="token_k1,seq_mean_k3",
            rollout_rs_threshold="2.0,0.01",
        )

    seed_time = median_seconds(seed_is, args.is_repeats)
    head_time = median_seconds(head_correction, args.is_repeats)
    model = build_policy(args)
    train_time = median_seconds(make_train_step(args, model, old, mask, gen), args.train_repeats)

    print(
        f"batch: {args.batch} x {args.response_length} response tokens ({int(mask.sum())} valid), "
        f"prompt {args.prompt_length}; policy: Qwen2 hidden={args.hidden} layers={args.layers} "
        f"heads={args.heads} vocab={args.vocab}, micro-batch {args.micro_batch}; "
        f"torch {torch.__version__}, threads={torch.get_num_threads()}"
    )
    print(f"seed IS weights + metrics + mismatch metrics: median {seed_time * 1e3:.1f} ms over {args.is_repeats} runs")
    print(
        f"head rollout correction (token IS, batch norm, token_k1+seq_mean_k3): median {head_time * 1e3:.1f} ms "
        f"over {args.is_repeats} runs"
    )
    print(
        f"policy loss forward+backward (compute_policy_loss_vanilla): median {train_time * 1e3:.0f} ms "
        f"over {args.train_repeats} runs"
    )
    print(f"IS overhead ratio: {seed_time / train_time:.2%}")
    print(f"head rollout-correction overhead ratio: {head_time / train_time:.2%}")


if __name__ == "__main__":
    main()
