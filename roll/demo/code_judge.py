"""Preparation of the code-and-judge demo: a tiny policy that writes Python functions and answers word problems,
and a tiny judge model that says YES or NO (roll.demo.code_task has the tasks).

`prepare_code_judge_demo(output_dir, CodeJudgeDemoSettings(...))` writes
    <output_dir>/model/          the policy (Qwen2 + tokenizer), warm-started on the reply formats only
    <output_dir>/judge/          the judge (same tokenizer), warm-started on YES/NO verdicts
    <output_dir>/train.jsonl     code rows (assert test cases) and word problems (reference answers)
    <output_dir>/heldout.jsonl   the same two kinds in phrasings never seen in training
    <output_dir>/prepared.json   the settings + a summary; a second call with equal settings is a no-op
and returns the summary. Nothing here runs a generated program: the code replies are compared as text with
the program that answers the prompt (the RL run grades them in the sandbox).
"""

import dataclasses
import time
from collections import Counter
from pathlib import Path

import torch

from roll.demo import code_task
from roll.demo import task as math_task
from roll.demo.rlvr import encode_prompts, load_model, locked_preparation
from roll.demo.tiny_model import build_tokenizer, save_random_qwen2
from roll.demo.warm_start import format_only_examples, warm_start
from roll.utils.functional import left_pad
from roll.workers.rewards.code_sandbox import extract_program
from roll.workers.rewards.llm_judge import parse_verdict

FORMAT_VERSION = 1
REQUIRED = ["model/config.json", "model/model.safetensors", "judge/model.safetensors", "train.jsonl", "heldout.jsonl"]


@dataclasses.dataclass(frozen=True)
class CodeJudgeDemoSettings:
    seed: int = 0
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    policy_warm_start_steps: int = 80  # reply formats: programs with random constants, random answers
    judge_warm_start_steps: int = 600  # at judge_lr, then judge_anneal_steps at judge_lr / 3 and judge_lr / 10 each
    judge_anneal_steps: int = 300
    warm_start_batch_size: int = 32
    warm_start_lr: float = 3e-3
    judge_lr: float = 3e-3


def prepare_code_judge_demo(
    output_dir, settings: CodeJudgeDemoSettings = CodeJudgeDemoSettings(), force: bool = False, log=print
) -> dict:
    """Prepares `output_dir` (see the module docstring) unless it already holds these settings."""
    payload = {"format_version": FORMAT_VERSION, "settings": dataclasses.asdict(settings)}
    return locked_preparation(output_dir, payload, REQUIRED, lambda out: _prepare(out, settings), force, log)


def _prepare(out: Path, settings: CodeJudgeDemoSettings) -> dict:
    started = time.perf_counter()
    train, heldout = code_task.split(settings.seed)
    math_task.write_jsonl(train, out / "train.jsonl")
    math_task.write_jsonl(heldout, out / "heldout.jsonl")
    tokenizer = build_tokenizer(code_task.tokenizer_corpus())
    shape = {
        "hidden_size": settings.hidden_size,
        "intermediate_size": 4 * settings.hidden_size,
        "num_layers": settings.num_layers,
        "num_heads": settings.num_heads,
        "num_kv_heads": settings.num_heads,
        "max_position_embeddings": 256,
    }
    _, parameters = save_random_qwen2(out / "model", tokenizer, seed=settings.seed, **shape)
    save_random_qwen2(out / "judge", tokenizer, seed=settings.seed + 1, **shape)
    policy_chats = code_task.code_warm_start([p for p in train if p["tag"] == code_task.CODE_TAG], settings.seed)
    policy_chats += format_only_examples(  # word problems answered with random numbers: the format, not the sums
        [p["prompt"] for p in train if p["tag"] == code_task.JUDGE_TAG][: len(policy_chats)],
        math_task.answer_pool(),
        settings.seed,
        answer_format=math_task.answer_text,
    )
    policy_losses = warm_start(
        str(out / "model"), policy_chats, settings.policy_warm_start_steps, settings.warm_start_batch_size,
        settings.warm_start_lr, settings.seed,
    )  # fmt: skip
    judge_chats = code_task.judge_examples(code_task.JUDGE_PROMPT, math_task.answer_pool())
    judge_losses = []
    phases = [(settings.judge_warm_start_steps, 1), (settings.judge_anneal_steps, 3), (settings.judge_anneal_steps, 10)]
    for phase, (steps, divisor) in enumerate(phases):  # a falling lr: at a constant one the verdicts keep flipping
        judge_losses += warm_start(
            str(out / "judge"), judge_chats, steps, settings.warm_start_batch_size, settings.judge_lr / divisor,
            settings.seed + phase,
        )  # fmt: skip
    policy, tokenizer = load_model(out / "model")
    judge, _ = load_model(out / "judge")
    code_rows = [r for r in heldout if r["tag"] == code_task.CODE_TAG]
    math_rows = [r for r in heldout if r["tag"] == code_task.JUDGE_TAG]
    code_replies = greedy_replies(policy, tokenizer, [r["prompt"] for r in code_rows], 20)
    math_replies = greedy_replies(policy, tokenizer, [r["prompt"] for r in math_rows], 6)
    table = judge_table_accuracy(judge, tokenizer)
    return {
        "train_rows": dict(Counter(r["tag"] for r in train)),
        "heldout_rows": dict(Counter(r["tag"] for r in heldout)),
        "vocab_size": len(tokenizer),
        "parameters": parameters,
        "policy_warm_start_loss": [policy_losses[0], sum(policy_losses[-10:]) / 10],
        "judge_warm_start_loss": [judge_losses[0], sum(judge_losses[-10:]) / 10],
        "heldout_code_programs_right": exact_programs(code_replies, code_rows),
        "heldout_code_well_formed": sum(extract_program(r) is not None for r in code_replies) / len(code_rows),
        "heldout_math_answers_right": sum(
            r == math_task.answer_text(row["ground_truth"]) for r, row in zip(math_replies, math_rows)
        )
        / len(math_rows),
        "judge_table_accuracy": table,
        "seconds": round(time.perf_counter() - started, 1),
    }


def exact_programs(replies: list[str], rows: list[dict]) -> float:
    """Share of replies whose program is, as text, the one that answers the row (no program is run here)."""
    expected = {p["prompt"]: code_task.program(*p["function"]) for p in code_task.code_problems()}
    return sum(extract_program(r) == expected[row["prompt"]] for r, row in zip(replies, rows)) / len(rows)


@torch.no_grad()
def greedy_replies(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 256) -> list[str]:
    model.eval()
    replies = []
    for start in range(0, len(prompts), batch_size):
        ids, mask = left_pad(encode_prompts(tokenizer, prompts[start : start + batch_size]), tokenizer.pad_token_id)
        out = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
        replies += tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
    return replies


def judge_verdicts(judge, tokenizer, pairs: list[tuple[str, str]]) -> list[float | None]:
    """The judge's greedy verdicts (1 YES, 0 NO, None neither) on (student answer, reference) pairs, read as the
    judge reward reads them."""
    prompts = [code_task.JUDGE_PROMPT.format(question="", reference=t, response=a) for a, t in pairs]
    return [
        parse_verdict(r, "yes_no", 1.0) for r in greedy_replies(judge, tokenizer, prompts, code_task.JUDGE_REPLY_TOKENS)
    ]


def judge_table_accuracy(judge, tokenizer) -> float:
    """Share of the judge's training table (every reference × every taught answer, once each) given the taught
    verdict (read as the judge reward reads it)."""
    rows = sorted({(a, t, reply) for t in math_task.answer_pool() for a, reply in code_task.verdict_table(t)})
    verdicts = judge_verdicts(judge, tokenizer, [(a, t) for a, t, _ in rows])
    return sum(got == parse_verdict(reply, "yes_no", 1.0) for got, (_, _, reply) in zip(verdicts, rows)) / len(rows)
