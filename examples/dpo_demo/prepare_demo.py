"""Prepare the embedded DPO demo: the warm-started tiny model of the RLVR demo and preference pairs of its task.

    python examples/dpo_demo/prepare_demo.py --output_dir dpo_demo_data [--seed 0] [--force]

Writes <output_dir>/base/ (the RLVR demo's preparation: a tiny Qwen2 model warm-started on the reply format only,
roll/demo/rlvr.py), <output_dir>/train.jsonl and heldout.jsonl: one pair per word problem, {"instruction": the
problem, "chosen": the right answer "\\boxed{a+b}", "rejected": the base model's own greedy reply where it is
wrong (else a wrong answer drawn with the seed)}. The held-out
pairs come from the held-out phrasings (no sentence frame of theirs is in training). Re-running with the same
settings does nothing. `python examples/start_dpo_pipeline.py` with no arguments prepares ./dpo_demo_data itself.
"""

import argparse
import dataclasses
import json
import os
import random
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 threads on 2 busy cores are 10-40x slower

from roll.demo import task as demo_task  # noqa: E402
from roll.demo.rlvr import DemoSettings, locked_preparation, prepare_demo  # noqa: E402

FORMAT_VERSION = 2  # bump when the pairs' meaning changes
REQUIRED = ["train.jsonl", "heldout.jsonl", "base/model/config.json", "base/model/model.safetensors"]


def pairs(problems: list[dict], replies: list[str], seed: int) -> list[dict]:
    """One (instruction, chosen, rejected) row per problem: the right answer against the base model's own greedy
    reply where that is wrong and well formed (the mistakes DPO should unlearn), else a seeded wrong answer."""
    rng = random.Random(seed)
    rows = []
    for problem, reply in zip(problems, replies, strict=True):
        chosen = demo_task.answer_text(problem["ground_truth"])
        reply = reply.strip()
        if reply == chosen or not (reply.startswith("\\boxed{") and reply.endswith("}")):
            wrong = [a for a in demo_task.answer_pool() if a != problem["ground_truth"]]
            reply = demo_task.answer_text(rng.choice(wrong))
        rows.append(
            {
                "instruction": problem["prompt"],
                "chosen": chosen,
                "rejected": reply,
                "ground_truth": problem["ground_truth"],  # for the greedy evaluation; the pipeline ignores it
            }
        )
    return rows


def greedy_replies(model_dir, problems: list[dict], max_new_tokens: int) -> list[str]:
    from roll.demo.rlvr import greedy_eval, load_model

    model, tokenizer = load_model(str(model_dir))
    return greedy_eval(model, tokenizer, problems, max_new_tokens)["replies"]


def write_pairs(out: Path, model_dir, settings: DemoSettings) -> dict:
    """<out>/train.jsonl and heldout.jsonl: the pairs of the demo task's split, against `model_dir`'s replies."""
    train, heldout = demo_task.split_problems(settings.seed, settings.heldout_phrasings, settings.balance_answers)
    for name, problems, seed in (("train", train, settings.seed), ("heldout", heldout, settings.seed + 1)):
        replies = greedy_replies(model_dir, problems, settings.eval_max_new_tokens)
        write_jsonl(pairs(problems, replies, seed), Path(out) / f"{name}.jsonl")
    return {"train_pairs": len(train), "heldout_pairs": len(heldout)}


def write_jsonl(rows: list[dict], path: Path) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def prepare_dpo_demo(output_dir, settings: DemoSettings | None = None, force: bool = False, log=print) -> dict:
    """Prepares `output_dir` (module docstring) unless it holds these settings (default: DemoSettings()) already;
    returns a summary."""
    settings = settings or DemoSettings()
    payload = {"dpo_format_version": FORMAT_VERSION, "settings": dataclasses.asdict(settings)}

    def build(out: Path) -> dict:
        started = time.perf_counter()
        base = prepare_demo(out / "base", settings, force=force, log=lambda line: None)
        counts = write_pairs(out, out / "base" / "model", settings)
        return {
            **counts,
            "base_heldout_accuracy": base["heldout_accuracy"],
            "seconds": round(time.perf_counter() - started, 1),
        }

    return locked_preparation(output_dir, payload, REQUIRED, build, force, log)


def greedy_accuracy(model_dir, heldout_file) -> float:
    """The greedy held-out accuracy (math-verify) of the model in `model_dir` on the held-out pairs' problems."""
    from roll.demo.rlvr import greedy_eval, load_model

    rows = [{"prompt": r["instruction"], "ground_truth": r["ground_truth"]} for r in demo_task.read_jsonl(heldout_file)]
    model, tokenizer = load_model(str(model_dir))
    return greedy_eval(model, tokenizer, rows, DemoSettings().eval_max_new_tokens)["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--seed", type=int, default=DemoSettings().seed)
    parser.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    args = parser.parse_args()
    s = prepare_dpo_demo(args.output_dir, DemoSettings(seed=args.seed), force=args.force)
    print(
        f"DPO demo data in {args.output_dir}: {s['train_pairs']} training / {s['heldout_pairs']} held-out pairs "
        f"(right vs wrong answer), base model's greedy held-out accuracy {100 * s['base_heldout_accuracy']:.1f}%"
        + (" [cached]" if s["skipped"] else f" [{s['seconds']:.0f}s]")
    )


if __name__ == "__main__":
    main()
