"""Prompt datasets for rollout and validation, read with `datasets` (json/jsonl/csv/parquet).

Each row becomes: prompt token ids (chat template applied if asked), the prompt text, its
`ground_truth` and its reward-domain `tag`. Rows that cannot be used raise an error naming the file
and row; prompts longer than `prompt_length` are dropped with a count, or rejected, per config.
"""

import json
from numbers import Real
from pathlib import Path

import numpy as np

from roll.distributed.data_proto import DataProto
from roll.utils.functional import left_pad
from roll.utils.logging import get_logger

logger = get_logger("roll.data")

_LOADERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def _builder_for(files: list[str]) -> str:
    kinds = set()
    for name in files:
        suffix = Path(name).suffix.lower()
        if suffix not in _LOADERS:
            raise ValueError(
                f"data_args.file_name: {name!r} has an unsupported extension {suffix!r}; use one of {sorted(_LOADERS)}"
            )
        if not Path(name).is_file():
            raise FileNotFoundError(f"data_args.file_name: {name!r} does not exist")
        kinds.add(_LOADERS[suffix])
    if len(kinds) != 1:
        raise ValueError(f"data_args.file_name: mix of formats {sorted(kinds)} in {files}; use one format per role")
    return kinds.pop()


ROW_EXAMPLE = '{"prompt": "What is 2+3?", "ground_truth": "5", "tag": "math"}'


def _check_text_file(name: str, kind: str) -> None:
    """Errors `datasets` reports without the file or line (or not at all): empty files, bytes that are not
    UTF-8, JSON lines that do not parse or are not objects. Parquet files are binary and left to `datasets`."""
    if kind == "parquet":
        return
    raw = Path(name).read_bytes()
    if not raw.strip():
        raise ValueError(f"data_args.file_name: {name!r} is empty; it needs one prompt per row, e.g. {ROW_EXAMPLE}")
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(
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
            raise ValueError(
                f"data_args.file_name: {name!r} holds one JSON {type(whole).__name__}, not rows; write a JSON "
                f"list of objects or one object per line, e.g. {ROW_EXAMPLE}"
            )
        return
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as error:
            raise ValueError(
                f"data_args.file_name: {name!r} line {number} is not valid JSON ({error}); each line must be one "
                f"JSON object, e.g. {ROW_EXAMPLE}"
            ) from None
        if not isinstance(row, dict):
            raise ValueError(
                f"data_args.file_name: {name!r} line {number} is a JSON {type(row).__name__}, not an object; "
                f"each line must be one JSON object, e.g. {ROW_EXAMPLE}"
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
    raise ValueError(
        f"{where}: '{data_args.ground_truth_key}' = {truth!r} ({type(truth).__name__}): expected a string or a "
        f'number (the reference answer the reward compares with), e.g. "5"'
    )


def _prompt_text(row: dict, data_args, tokenizer, where: str) -> str:
    messages = row.get(data_args.messages_key)
    prompt = row.get(data_args.prompt_key)
    if messages is None and prompt is None:
        raise ValueError(
            f"{where}: neither a '{data_args.prompt_key}' nor a '{data_args.messages_key}' value "
            f"(set data_args.prompt_key / data_args.messages_key to your column names)"
        )
    if messages is None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{where}: '{data_args.prompt_key}' must be a non-empty string, got {prompt!r}")
        if not data_args.apply_chat_template:
            return prompt
        messages = [{"role": "user", "content": prompt}]
    if not data_args.apply_chat_template:
        raise ValueError(f"{where}: '{data_args.messages_key}' needs data_args.apply_chat_template: true")
    return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)


def load_prompt_rows(data_args, tokenizer, prompt_length: int) -> list[dict]:
    """Read, template and tokenize every row; returns dicts with prompt_ids, prompt_text, ground_truth, tag."""
    import datasets

    files = [data_args.file_name] if isinstance(data_args.file_name, str) else list(data_args.file_name)
    kind = _builder_for(files)
    for name in files:
        _check_text_file(name, kind)
    try:
        table = datasets.load_dataset(kind, data_files=files, split="train")
    except Exception as error:  # datasets' own message rarely names the file
        raise ValueError(
            f"data_args.file_name: {files} could not be read as {kind} ({type(error).__name__}: {error}); "
            f"rows look like {ROW_EXAMPLE}"
        ) from error
    rows, too_long = [], []
    for index, row in enumerate(table):
        where = f"{files[0] if len(files) == 1 else files} row {index}"
        text = _prompt_text(row, data_args, tokenizer, where)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) > prompt_length:
            too_long.append(index)
            continue
        truth = _ground_truth(row, data_args, where)
        rows.append(
            {
                "prompt_ids": ids,
                "prompt_text": text,
                "ground_truth": truth,
                "tag": row.get(data_args.tag_key),
            }
        )
    if too_long:
        if data_args.on_long_prompt == "error":
            raise ValueError(
                f"{files}: {len(too_long)} prompts are longer than prompt_length={prompt_length} "
                f"tokens (first rows: {too_long[:5]}); raise prompt_length or set "
                f"data_args.on_long_prompt: drop"
            )
        logger.warning(
            "%s: dropped %d of %d prompts longer than prompt_length=%d tokens",
            files,
            len(too_long),
            len(table),
            prompt_length,
        )
    if not rows:
        raise ValueError(f"{files}: no usable prompt rows")
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
