"""Preparation of the embedded RLVR demo: tiny model + tokenizer, data files, format-only warm start.

`prepare_demo(output_dir, DemoSettings(...))` writes
    <output_dir>/model/          HF folder (Qwen2 config + weights + tokenizer), warm-started
    <output_dir>/train.jsonl     prompt, ground_truth, tag
    <output_dir>/heldout.jsonl   prompt, ground_truth, tag (phrasings never seen in training)
    <output_dir>/prepared.json   the settings + a summary; a second call with equal settings is a no-op
and returns the summary. `greedy_eval` is the held-out measurement used before/after RL.
"""

import dataclasses
import json
import shutil
import time
from collections import Counter
from pathlib import Path

import torch

from roll.demo import task as demo_task
from roll.demo.tiny_model import build_tiny_model
from roll.demo.warm_start import format_only_examples, warm_start
from roll.utils.functional import left_pad

MARKER = "prepared.json"
FORMAT_VERSION = 3  # bump when the files' meaning changes (tokenizer, task, split)


@dataclasses.dataclass(frozen=True)
class DemoSettings:
    seed: int = 0
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    heldout_phrasings: int = 12
    balance_answers: bool = False  # on: equal training problems per answer (measured: worse with the shipped config)
    warm_start: str = "reading"  # "reading": one-number sentences read back; "random": task prompts, random answers
    warm_start_steps: int = 60
    warm_start_batch_size: int = 32
    warm_start_lr: float = 3e-3
    eval_max_new_tokens: int = 6  # = the demo's response_length (a reply is 5 tokens: \boxed { N } EOS)


def _marker_payload(settings: DemoSettings) -> dict:
    return {"format_version": FORMAT_VERSION, "settings": dataclasses.asdict(settings)}


REQUIRED = ["model/config.json", "model/model.safetensors", "model/tokenizer.json", "train.jsonl", "heldout.jsonl"]


def stored_summary(output_dir, payload: dict, required: list[str]) -> dict | None:
    """The stored summary when `output_dir` holds a complete preparation whose marker matches `payload` and
    every `required` file exists."""
    marker = Path(output_dir) / MARKER
    if not marker.is_file():
        return None
    try:
        stored = json.loads(marker.read_text())
    except json.JSONDecodeError:
        return None
    if any(stored.get(k) != v for k, v in payload.items()) or not all(
        (Path(output_dir) / name).is_file() for name in required
    ):
        return None
    return stored.get("summary")


def is_prepared(output_dir, settings: DemoSettings) -> dict | None:
    """The stored summary when `output_dir` holds a complete preparation with these settings."""
    return stored_summary(output_dir, _marker_payload(settings), REQUIRED)


def locked_preparation(output_dir, payload: dict, required: list[str], build, force: bool, log) -> dict:
    """`build(out) -> summary` into `output_dir` unless it already holds a preparation of `payload` (then the
    stored summary, with skipped=True). Concurrent callers on one folder are serialised by a lock file next to
    it; the later ones find it prepared. The marker is written last, so a half-done preparation is redone."""
    import fcntl

    out = Path(output_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force:
            summary = stored_summary(out, payload, required)
            if summary is not None:
                log(
                    f"demo already prepared in {out} with these settings (delete {out / MARKER} or pass --force "
                    "to redo)"
                )
                return dict(summary, skipped=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / MARKER).unlink(missing_ok=True)
        for name in {r.split("/")[0] for r in required if "/" in r}:  # model folders are rebuilt from scratch
            if (out / name).exists():
                shutil.rmtree(out / name)
        summary = build(out)
        (out / MARKER).write_text(json.dumps(dict(payload, summary=summary), indent=1))
        return dict(summary, skipped=False)


def prepare_demo(output_dir, settings: DemoSettings = DemoSettings(), force: bool = False, log=print) -> dict:
    """Prepares `output_dir` (see the module docstring) unless it already holds these settings. Concurrent
    callers on the same folder are serialised by a lock file next to it; the later ones find it prepared."""
    return locked_preparation(
        output_dir, _marker_payload(settings), REQUIRED, lambda out: _prepare(out, settings), force, log
    )


def _prepare(out: Path, settings: DemoSettings) -> dict:
    started = time.perf_counter()
    model_dir = out / "model"
    train, heldout = demo_task.split_problems(settings.seed, settings.heldout_phrasings, settings.balance_answers)
    demo_task.write_jsonl(train, out / "train.jsonl")
    demo_task.write_jsonl(heldout, out / "heldout.jsonl")
    build_tiny_model(
        str(model_dir),
        demo_task.tokenizer_corpus(),
        hidden_size=settings.hidden_size,
        num_layers=settings.num_layers,
        num_heads=settings.num_heads,
        seed=settings.seed,
    )
    conversations = warm_start_conversations(settings, train)
    losses = warm_start(
        str(model_dir),
        conversations,
        steps=settings.warm_start_steps,
        batch_size=settings.warm_start_batch_size,
        lr=settings.warm_start_lr,
        seed=settings.seed,
    )
    model, tokenizer = load_model(model_dir)
    evaluation = greedy_eval(model, tokenizer, heldout, settings.eval_max_new_tokens)
    n_params = sum(p.numel() for p in model.parameters())
    prompt_tokens = max(len(ids) for ids in encode_prompts(tokenizer, [r["prompt"] for r in train + heldout]))
    return {
        "train_rows": len(train),
        "heldout_rows": len(heldout),
        "vocab_size": len(tokenizer),
        "parameters": n_params,
        "max_prompt_tokens": prompt_tokens,
        "warm_start_loss_first": losses[0] if losses else None,
        "warm_start_loss_last": sum(losses[-10:]) / len(losses[-10:]) if losses else None,
        "heldout_accuracy": evaluation["accuracy"],
        "heldout_format_ok": evaluation["format_ok"],
        "heldout_answer_counts": evaluation["answer_counts"],
        "seconds": round(time.perf_counter() - started, 1),
    }


def warm_start_conversations(settings: DemoSettings, train: list[dict]) -> list[list[dict]]:
    if settings.warm_start == "random":
        return format_only_examples(
            [p["prompt"] for p in train], demo_task.answer_pool(), settings.seed, answer_format=demo_task.answer_text
        )
    reading = [
        [
            {"role": "user", "content": r["prompt"]},
            {"role": "assistant", "content": demo_task.answer_text(r["ground_truth"])},
        ]
        for r in demo_task.reading_problems()
    ]
    if settings.warm_start == "reading":
        return reading
    if settings.warm_start == "mixed":  # reading + task prompts with random answers, half and half
        random_part = format_only_examples(
            [p["prompt"] for p in train[: len(reading)]],
            demo_task.answer_pool(),
            settings.seed,
            answer_format=demo_task.answer_text,
        )
        return reading + random_part
    raise ValueError(f"warm_start must be 'reading', 'mixed' or 'random', got {settings.warm_start!r}")


# ---- shared by preparation, the learnability probe and tests -----------------------------------------
def load_model(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return model, tokenizer


def encode_prompts(tokenizer, prompts: list[str]) -> list[list[int]]:
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in prompts
    ]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


@torch.no_grad()
def greedy_eval(model, tokenizer, rows: list[dict], max_new_tokens: int = 8, batch_size: int = 256) -> dict:
    """Greedy replies to `rows` graded by math-verify: accuracy, share of replies with a boxed number,
    and how often each answer was given (a warm-started model answers near chance, often one number)."""
    from roll.utils.math_grader import grade

    was_training = model.training
    model.eval()
    replies = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        ids, mask = left_pad(encode_prompts(tokenizer, [r["prompt"] for r in chunk]), tokenizer.pad_token_id)
        out = model.generate(
            input_ids=ids.to(model.device),
            attention_mask=mask.to(model.device),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        replies += tokenizer.batch_decode(out[:, ids.shape[1] :].cpu(), skip_special_tokens=True)
    model.train(was_training)
    scores = [grade(reply, row["ground_truth"]) for reply, row in zip(replies, rows)]
    boxed = [r.strip() for r in replies]
    counts = Counter(
        r[len("\\boxed{") : -1] if r.startswith("\\boxed{") and r.endswith("}") else "other" for r in boxed
    )
    return {
        "accuracy": sum(scores) / len(scores),
        "format_ok": sum(r.startswith("\\boxed{") and r.endswith("}") for r in boxed) / len(boxed),
        "answer_counts": dict(sorted(counts.items())),
        "replies": replies,
        "scores": scores,
    }
