"""Prompt datasets for rollout and validation, read with `datasets` (json/jsonl/csv/parquet).

Each row becomes: prompt token ids (chat template applied if asked), the prompt text, its
`ground_truth` and its reward-domain `tag`. Rows that cannot be used raise an error naming the file
and row; prompts longer than `prompt_length` are dropped with a count, or rejected, per config.
"""

import json
from numbers import Real
from pathlib import Path

import numpy as np

from roll.data.chat_template import render_chat
from roll.distributed.data_proto import DataProto
from roll.utils.errors import InputError, MissingInput
from roll.utils.functional import left_pad
from roll.utils.logging import get_logger
from roll.utils.paths import not_a_regular_file

logger = get_logger("roll.data")

_LOADERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def _builder_for(files: list[str]) -> str:
    kinds = set()
    for name in files:
        suffix = Path(name).suffix.lower()
        if suffix not in _LOADERS:
            raise InputError(
                f"data_args.file_name: {name!r} has an unsupported extension {suffix!r}; use one of {sorted(_LOADERS)}"
            )
        problem = not_a_regular_file(name)  # a directory, FIFO or device: named, never opened
        if problem:
            raise InputError(f"data_args.file_name: {name!r} {problem}; give a regular data file, read whole")
        if not Path(name).is_file():
            raise MissingInput(f"data_args.file_name: {name!r} does not exist")
        kinds.add(_LOADERS[suffix])
    if len(kinds) != 1:
        raise InputError(f"data_args.file_name: mix of formats {sorted(kinds)} in {files}; use one format per role")
    return kinds.pop()


ROW_EXAMPLE = '{"prompt": "What is 2+3?", "ground_truth": "5", "tag": "math"}'


def _check_text_file(name: str, kind: str, what: str = "prompt", example: str = ROW_EXAMPLE) -> None:
    """Errors `datasets` reports without the file or line (or not at all): empty files, bytes that are not
    UTF-8, JSON lines that do not parse or are not objects. Parquet files are binary and left to `datasets`."""
    if kind == "parquet":
        return
    raw = Path(name).read_bytes()
    if not raw.strip():
        raise InputError(f"data_args.file_name: {name!r} is empty; it needs one {what} per row, e.g. {example}")
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InputError(
                f"data_args.file_name: {name!r} line {number} is not UTF-8 (byte 0x{line[error.start]:02x} at "
                f"column {error.start + 1}); re-save the file as UTF-8"
            ) from None
    if kind != "json":
        return
    try:
        whole = json.loads(raw)
    except ValueError:
        whole = None  # not one JSON document: JSON lines
    else:
        if not isinstance(whole, (list, dict)):
            raise InputError(
                f"data_args.file_name: {name!r} holds one JSON {type(whole).__name__}, not rows; write a JSON "
                f"list of objects or one object per line, e.g. {example}"
            )
        return
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as error:
            raise InputError(
                f"data_args.file_name: {name!r} line {number} is not valid JSON ({error}); each line must be one "
                f"JSON object, e.g. {example}"
            ) from None
        if not isinstance(row, dict):
            raise InputError(
                f"data_args.file_name: {name!r} line {number} is a JSON {type(row).__name__}, not an object; "
                f"each line must be one JSON object, e.g. {example}"
            )


def _ground_truth(row: dict, data_args, where: str):
    truth = row.get(data_args.ground_truth_key)
    if truth is None and row.get("test_cases") is not None:  # ROLL's code rows: the code reward's ground truth
        cases = row["test_cases"]
        cases = json.loads(cases) if isinstance(cases, str) else cases
        return json.dumps({"case_type": row.get("case_type") or "input", "test_cases": cases})
    if truth is None or isinstance(truth, str):
        return truth
    if isinstance(truth, Real) and not isinstance(truth, bool):
        return str(truth)
    raise InputError(
        f"{where}: '{data_args.ground_truth_key}' = {truth!r} ({type(truth).__name__}): expected a string or a "
        f'number (the reference answer the reward compares with), e.g. "5"'
    )


# ChatML, the format of data_args.chat_template: chatml (role headers between <|im_start|> and <|im_end|>)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _prompt_text(row: dict, data_args, tokenizer, where: str) -> str:
    messages = row.get(data_args.messages_key)
    prompt = row.get(data_args.prompt_key)
    if messages is None and prompt is None:
        raise InputError(
            f"{where}: neither a '{data_args.prompt_key}' nor a '{data_args.messages_key}' value "
            f"(set data_args.prompt_key / data_args.messages_key to your column names)"
        )
    if messages is None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError(f"{where}: '{data_args.prompt_key}' must be a non-empty string, got {prompt!r}")
        if not data_args.apply_chat_template:
            return prompt
        messages = [{"role": "user", "content": prompt}]
    if not data_args.apply_chat_template:
        raise InputError(f"{where}: '{data_args.messages_key}' needs data_args.apply_chat_template: true")
    extra = {"chatml": {"chat_template": CHATML}, "qwen3": {"enable_thinking": True}}.get(data_args.chat_template, {})
    return render_chat(tokenizer, messages, add_generation_prompt=True, **extra)  # a broken template: named


def render_prompt(text: str, data_args, tokenizer) -> str:
    """The prompt a data row whose prompt column is `text` becomes (the chat template applied as configured)."""
    return _prompt_text({data_args.prompt_key: text}, data_args, tokenizer, "a sample prompt")


def read_column(name: str, column: str) -> list | None:
    """One column of a data file, read without tokenizing (None where the file does not exist or cannot be
    read: the start-up checks name those problems); a file without the column gives one None per row."""
    import datasets

    suffix = Path(name).suffix.lower()
    if suffix not in _LOADERS or not Path(name).is_file():
        return None
    try:
        table = datasets.load_dataset(_LOADERS[suffix], data_files=[name], split="train")
    except Exception:  # load_prompt_rows reports it, naming the file
        return None
    return list(table[column]) if column in table.column_names else [None] * len(table)


def check_template_available(data_args, tokenizer, files) -> None:
    """apply_chat_template needs a template: the tokenizer's own, or chatml (roll's)."""
    if data_args.apply_chat_template and data_args.chat_template != "chatml" and not tokenizer.chat_template:
        raise InputError(
            f"data_args.apply_chat_template is true but the tokenizer of {tokenizer.name_or_path} has no chat "
            f"template, so the prompts of {files} cannot be wrapped: set data_args.chat_template: chatml (ROLL: "
            f"data_args.template) for the ChatML format, give the tokenizer a chat_template (tokenizer_config.json), "
            f"or set data_args.apply_chat_template: false to use the prompt text as it is"
        )


def data_files(file_name) -> list[str]:
    """data_args.file_name (one path or a list) as a list."""
    return [file_name] if isinstance(file_name, str) else list(file_name)


def read_tables(file_name, num_proc: int | None = None, what: str = "prompt", example: str = ROW_EXAMPLE):
    """(file, its `datasets` table) for each data file of `file_name`, in order: one format for all (.json, .jsonl,
    .csv or .parquet), each a regular file whose text rows are UTF-8 JSON objects; a problem is an InputError naming
    the file (and line), with `example` as the shape of a row (`what`: what one row holds, for the message)."""
    import datasets

    files = data_files(file_name)
    kind = _builder_for(files)
    for name in files:
        _check_text_file(name, kind, what, example)
    for name in files:
        try:
            table = datasets.load_dataset(kind, data_files=[name], split="train", num_proc=num_proc)
        except Exception as error:  # datasets' own message rarely names the file
            raise InputError(
                f"data_args.file_name: {name} could not be read as {kind} ({type(error).__name__}: {error}); "
                f"rows look like {example}"
            ) from error
        yield name, table


def load_prompt_rows(data_args, tokenizer, prompt_length: int) -> list[dict]:
    """Read, template and tokenize every row; returns dicts with prompt_ids, prompt_text, ground_truth, tag."""
    files = data_files(data_args.file_name)
    check_template_available(data_args, tokenizer, files)
    rows, too_long, too_long_lengths, total = [], [], [], 0
    # file by file: rows know their file (data_args.interleave_probs)
    for source, (name, table) in enumerate(read_tables(files, data_args.preprocessing_num_workers)):
        total += len(table)
        for index, row in enumerate(table):
            where = f"{name} row {index}"
            text = _prompt_text(row, data_args, tokenizer, where)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(ids) > prompt_length:
                too_long.append(where)
                too_long_lengths.append(len(ids))
                continue
            truth = _ground_truth(row, data_args, where)
            rows.append(
                {
                    "prompt_ids": ids,
                    "prompt_text": text,
                    "ground_truth": truth,
                    "tag": row.get(data_args.tag_key),
                    "source": source,
                    "where": where,  # file and row, for errors found later (routing, a missing ground truth)
                }
            )
    if too_long:
        if data_args.on_long_prompt == "error":
            raise InputError(
                f"{files}: {len(too_long)} prompts are longer than prompt_length={prompt_length} "
                f"tokens (first: {too_long[:5]}); raise prompt_length or set "
                f"data_args.on_long_prompt: drop"
            )
        logger.warning(
            "%s: dropped %d of %d prompts longer than prompt_length=%d tokens",
            files,
            len(too_long),
            total,
            prompt_length,
        )
    if not rows:
        shortest = min(too_long_lengths, default=None)
        why = (
            f": all {total} prompts are longer than prompt_length = {prompt_length} tokens (the shortest has "
            f"{shortest}, chat template included) and data_args.on_long_prompt: drop dropped them; raise prompt_length"
            if too_long and len(too_long) == total
            else ""
        )
        raise InputError(f"{files}: no usable prompt rows{why}")
    return rows


def collate_prompts(rows: list[dict], prompt_length: int, pad_token_id: int) -> DataProto:
    """Left-pad prompt ids to `prompt_length` (the batch layout of docs/contracts.md)."""
    prompts, mask = left_pad([row["prompt_ids"] for row in rows], pad_token_id, width=prompt_length)
    non_tensors = {
        key: np.array([row[key] for row in rows], dtype=object) for key in ("prompt_text", "ground_truth", "tag")
    }
    return DataProto.from_dict(tensors={"prompts": prompts, "attention_mask": mask}, non_tensors=non_tensors)


class PromptSampler:
    """Shuffled epochs over the rows; its position is part of every checkpoint."""

    def __init__(self, rows: list[dict], seed: int):
        self.rows, self.seed = rows, seed
        self.epoch, self.cursor = 0, 0
        self._order = self._permutation()

    def _permutation(self) -> list[int]:
        return np.random.default_rng(self.seed + self.epoch).permutation(len(self.rows)).tolist()

    def next_rows(self, count: int) -> list[dict]:
        picked = []
        while len(picked) < count:
            if self.cursor == len(self.rows):
                self.epoch, self.cursor = self.epoch + 1, 0
                self._order = self._permutation()
            picked.append(self.rows[self._order[self.cursor]])
            self.cursor += 1
        return picked

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.cursor = state["epoch"], state["cursor"]
        self._order = self._permutation()


class MixedPromptSampler:
    """Prompts from several pools (data files or reward domains), each pool a PromptSampler of its own.

    quota: a fixed number of prompts per pool in every batch — pool i gets int(p_i × count), the last pool
    with p > 0 the rest (ROLL's domain_interleave_probs; ROLL gives the rest to the last pool even at p = 0);
    draw: every prompt's pool is drawn with probabilities p (data_args.interleave_probs), from a generator
    seeded by (seed, batch number) so a resume redraws the same."""

    def __init__(self, pools: dict, probs: dict, seed: int, mode: str):
        if mode not in ("quota", "draw"):
            raise ValueError(f"mode must be 'quota' or 'draw', got {mode!r}")
        self.names = list(probs)
        self.probs = np.array([probs[name] for name in self.names], dtype=float)
        self.samplers = {name: PromptSampler(pools[name], seed + 7919 * (i + 1)) for i, name in enumerate(self.names)}
        self.seed, self.mode, self.batches = seed, mode, 0

    def _counts(self, count: int) -> list[int]:
        if self.mode == "draw":
            rng = np.random.default_rng([self.seed, self.batches])
            return np.bincount(
                rng.choice(len(self.names), size=count, p=self.probs), minlength=len(self.names)
            ).tolist()
        counts = [int(p * count) for p in self.probs]
        last = max(i for i, p in enumerate(self.probs) if p > 0)  # the rest goes to the last pool in use
        counts[last] += count - sum(counts)
        return counts

    def next_rows(self, count: int) -> list[dict]:
        picked = []
        for name, n in zip(self.names, self._counts(count)):
            if n:
                picked += self.samplers[name].next_rows(n)
        self.batches += 1
        return picked

    def state_dict(self) -> dict:
        return {"batches": self.batches, "pools": {name: s.state_dict() for name, s in self.samplers.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.batches = state["batches"]
        for name, sampler in self.samplers.items():
            sampler.load_state_dict(state["pools"][name])


def prompt_sampler(rows: list[dict], data_args, seed: int):
    """The training prompts' sampler: plain shuffled epochs, or mixed by domain / by file (data_args)."""
    if data_args.domain_interleave_probs is not None:
        probs, key, what = data_args.domain_interleave_probs, "domain", "domain_interleave_probs"
        mode = "quota"
    elif data_args.interleave_probs is not None:
        probs, key, what = dict(enumerate(data_args.interleave_probs)), "source", "interleave_probs"
        mode = "draw"
    else:
        return PromptSampler(rows, seed)
    pools = {name: [row for row in rows if row[key] == name] for name in probs}
    present = sorted({str(row[key]) for row in rows})
    unlisted = sorted({row[key] for row in rows} - set(probs), key=str)
    if unlisted:  # their rows would never be drawn: say so instead of dropping them
        raise InputError(
            f"actor_train.data_args.{what}: the data has rows of {unlisted} but no probability for them; "
            f"list every one (0 = leave it out); present: {present}"
        )
    empty = [name for name, pool in pools.items() if probs[name] > 0 and not pool]
    if empty:
        raise InputError(f"actor_train.data_args.{what}: no rows for {empty} (present: {present})")
    return MixedPromptSampler(pools, probs, seed, mode)
