"""A larger teacher for the distillation demos: a Qwen2 model twice as wide as the RLVR demo's tiny one, with the
same tokenizer (so a top-k index or a log-prob means the same token to both), supervised on the correct answers
of the demo task's TRAINING phrasings only.

`prepare_teacher(output_dir, TeacherSettings(...))` writes an HF folder (config, weights, tokenizer) and
`prepared.json` (the settings + a summary: its greedy held-out accuracy, measured as the RLVR demo measures it)
into `output_dir` and returns that directory; a second call with equal settings is a no-op. Deterministic for the
same settings on one kind of CPU (seeded initialisation and batch order; build it on one torch thread, as the
tests' build cache does, for the same weights on every machine).

The split is the RLVR demo's (`roll.demo.task.split_problems` with the same seed and held-out phrasings), so the
held-out phrasings the student is measured on were never seen by the teacher either: what it passes on is how to
read two numbers and add them, not memorised sentences.
"""

import dataclasses
import json
import time
from pathlib import Path

from roll.demo import task as demo_task
from roll.demo.rlvr import greedy_eval, load_model, locked_preparation
from roll.demo.tiny_model import build_tokenizer, save_random_qwen2
from roll.demo.warm_start import warm_start

FORMAT_VERSION = 1
REQUIRED = ["config.json", "model.safetensors", "tokenizer.json"]


@dataclasses.dataclass(frozen=True)
class TeacherSettings:
    seed: int = 0  # the task split's and the initialisation's (the RLVR demo's DemoSettings.seed)
    heldout_phrasings: int = 12  # as the RLVR demo's DemoSettings.heldout_phrasings: the same held-out split
    hidden_size: int = 128  # the demo student has 64
    num_layers: int = 2
    num_heads: int = 4  # head_dim 32, as vLLM-CPU needs
    steps: int = 400
    batch_size: int = 32
    lr: float = 3e-3
    eval_max_new_tokens: int = 6  # a reply is 5 tokens: \boxed { N } EOS


def _payload(settings: TeacherSettings) -> dict:
    return {"format_version": FORMAT_VERSION, "settings": dataclasses.asdict(settings)}


def prepare_teacher(output_dir, settings: TeacherSettings = TeacherSettings(), force: bool = False, log=print) -> Path:
    """`output_dir` ← the teacher (see the module docstring) unless it already holds these settings; returns
    `output_dir` (an HF model folder). Concurrent callers on one folder are serialised by a lock file beside it."""
    locked_preparation(output_dir, _payload(settings), REQUIRED, lambda out: _prepare(out, settings), force, log)
    return Path(output_dir)


def teacher_summary(output_dir) -> dict:
    """The summary `prepare_teacher` stored (parameters, training loss, held-out accuracy, seconds)."""
    return json.loads((Path(output_dir) / "prepared.json").read_text())["summary"]


def correct_answers(rows: list[dict]) -> list[list[dict]]:
    """One conversation per problem, answered with its correct boxed sum."""
    return [
        [
            {"role": "user", "content": r["prompt"]},
            {"role": "assistant", "content": demo_task.answer_text(r["ground_truth"])},
        ]
        for r in rows
    ]


def _prepare(out: Path, settings: TeacherSettings) -> dict:
    started = time.perf_counter()
    train, heldout = demo_task.split_problems(settings.seed, settings.heldout_phrasings)
    tokenizer = build_tokenizer(demo_task.tokenizer_corpus())  # the RLVR demo model's tokenizer, token for token
    _, parameters = save_random_qwen2(
        out,
        tokenizer,
        hidden_size=settings.hidden_size,
        intermediate_size=4 * settings.hidden_size,
        num_layers=settings.num_layers,
        num_heads=settings.num_heads,
        num_kv_heads=settings.num_heads,
        max_position_embeddings=256,
        seed=settings.seed,
    )
    losses = warm_start(
        str(out), correct_answers(train), settings.steps, settings.batch_size, settings.lr, settings.seed
    )
    model, tokenizer = load_model(out)
    evaluation = greedy_eval(model, tokenizer, heldout, settings.eval_max_new_tokens)
    return {
        "parameters": parameters,
        "vocab_size": len(tokenizer),
        "train_rows": len(train),
        "loss_first": losses[0],
        "loss_last": sum(losses[-10:]) / len(losses[-10:]),
        "heldout_accuracy": evaluation["accuracy"],
        "heldout_format_ok": evaluation["format_ok"],
        "seconds": round(time.perf_counter() - started, 1),
    }
