"""The SFT kind's embedded demo: a tiny, randomly initialised Qwen2 fine-tuned on the demo's word problems
(roll.demo.task) answered correctly, "Tom has 3 apples and finds 4 more . How many apples now ?" → "\\boxed{7}".

`prepare_sft_demo(output_dir)` writes (deterministic for a seed; a second call with equal settings is a no-op)
    <output_dir>/model/          HF folder (Qwen2 config + random weights + tokenizer with a chat template)
    <output_dir>/train.jsonl     instruction, output (ROLL's default prompt_key / response_key), ground_truth
    <output_dir>/heldout.jsonl   the same columns for the held-out phrasings (never seen in training)
    <output_dir>/prepared.json   the settings + a summary
The held-out rows give the validation loss (a subset, validation.data_args) and the greedy accuracy before and
after fine-tuning (`heldout_accuracy`, graded by math-verify as the RLVR demo's).
"""

import dataclasses
import json
import time
from pathlib import Path

from roll.demo import task as demo_task
from roll.demo.rlvr import greedy_eval, load_model, locked_preparation
from roll.demo.tiny_model import build_tiny_model

FORMAT_VERSION = 1  # bump when the files' meaning changes
REQUIRED = ["model/config.json", "model/model.safetensors", "model/tokenizer.json", "train.jsonl", "heldout.jsonl"]


@dataclasses.dataclass(frozen=True)
class SFTDemoSettings:
    seed: int = 0
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    heldout_phrasings: int = 12
    validation_rows: int = 64  # the first held-out rows form the validation file (the loss is cheap at this size)


def _payload(settings: SFTDemoSettings) -> dict:
    return {"format_version": FORMAT_VERSION, "kind": "sft", "settings": dataclasses.asdict(settings)}


def sft_row(problem: dict) -> dict:
    return {
        "instruction": problem["prompt"],
        "output": demo_task.answer_text(problem["ground_truth"]),
        "ground_truth": problem["ground_truth"],
    }


def write_rows(rows: list[dict], path: Path) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def prepare_sft_demo(output_dir, settings: SFTDemoSettings = SFTDemoSettings(), force: bool = False, log=print) -> dict:
    """Prepares `output_dir` (the module docstring) unless it already holds these settings; returns the summary
    (`skipped`: it was already there)."""
    return locked_preparation(output_dir, _payload(settings), REQUIRED, lambda out: _prepare(out, settings), force, log)


def _prepare(out: Path, settings: SFTDemoSettings) -> dict:
    started = time.perf_counter()
    train, heldout = demo_task.split_problems(settings.seed, settings.heldout_phrasings)
    write_rows([sft_row(p) for p in train], out / "train.jsonl")
    write_rows([sft_row(p) for p in heldout], out / "heldout.jsonl")
    write_rows([sft_row(p) for p in heldout[: settings.validation_rows]], out / "validation.jsonl")
    build_tiny_model(
        str(out / "model"),
        demo_task.tokenizer_corpus(),
        hidden_size=settings.hidden_size,
        num_layers=settings.num_layers,
        num_heads=settings.num_heads,
        seed=settings.seed,
    )
    return {"train_rows": len(train), "heldout_rows": len(heldout), "seconds": round(time.perf_counter() - started, 1)}


def heldout_accuracy(model_dir, data_dir) -> dict:
    """Greedy held-out accuracy of the model in `model_dir` on <data_dir>/heldout.jsonl (roll.demo.rlvr.greedy_eval:
    accuracy, format_ok, answer_counts)."""
    rows = [json.loads(line) for line in (Path(data_dir) / "heldout.jsonl").read_text().splitlines() if line]
    model, tokenizer = load_model(model_dir)
    return greedy_eval(
        model, tokenizer, [{"prompt": r["instruction"], "ground_truth": r["ground_truth"]} for r in rows]
    )
