"""DPO rows → token ids, ROLL's encoder and collator (docs/dpo.md, "Data layout").

Per row: `prompt_text` = the user turn (the prompt column) rendered **without** the generation prompt; the
chosen / rejected text = the user turn plus the assistant's answer, rendered without the generation prompt and
kept whole (no trailing-newline strip). `prompt_id_len` = len(tokenize(prompt_text)), so the response span the
log-probs are summed over starts right after the user turn: it holds the assistant header and the template's
newline after the end-of-turn token, as in ROLL (its quirk Q3). A pair whose chosen or rejected ids are longer
than `sequence_length` is dropped (ROLL's filter), and the count is logged.

The batch: every sequence right padded to exactly `sequence_length`, rows interleaved chosen_0, rejected_0,
chosen_1, … (roll.algorithms.dpo.interleave_pairs), `prompt_id_lens` repeated per pair, position_ids =
clip(cumsum(attention_mask) − 1, 0).
"""

from dataclasses import dataclass

import torch

from roll.algorithms.dpo import interleave_pairs
from roll.data.chat_template import render_chat
from roll.data.prompts import CHATML, _builder_for
from roll.distributed.data_proto import DataProto
from roll.utils.errors import InputError
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline.dpo")

ROW_EXAMPLE = '{"instruction": "What is 2 + 3?", "chosen": "5", "rejected": "6"}'
TEMPLATE_ARGS = {"chatml": {"chat_template": CHATML}, "qwen3": {"enable_thinking": True}}  # data_args.chat_template


@dataclass(frozen=True)
class Columns:
    """The dataset columns of a pair (ROLL's hard-coded "instruction", chosen_key, rejected_key)."""

    prompt: str = "instruction"
    chosen: str = "chosen"
    rejected: str = "rejected"

    @classmethod
    def of(cls, config) -> "Columns":
        return cls(config.prompt_key, config.chosen_key, config.rejected_key)


@dataclass
class EncodedPair:
    chosen_ids: list[int]
    rejected_ids: list[int]
    prompt_id_len: int
    where: str  # file and row, for errors


def _text(row: dict, column: str, key: str, where: str) -> str:
    if column not in row:
        raise InputError(
            f"{where}: no '{column}' column (the {key} key names it); rows look like {ROW_EXAMPLE}, or set {key} "
            "to your column's name"
        )
    value = row[column]
    if not isinstance(value, str) or not value:
        raise InputError(f"{where}: '{column}' ({key}) = {value!r}: expected non-empty text")
    return value


def renderer(tokenizer, chat_template: str | None):
    """render(messages) → text without the generation prompt, with the configured template (TEMPLATE_ARGS)."""
    extra = TEMPLATE_ARGS.get(chat_template, {})
    return lambda messages: render_chat(tokenizer, messages, add_generation_prompt=False, **extra)


def pair_texts(row: dict, columns: Columns, render, where: str) -> tuple[str, str, str]:
    """(prompt_text, chosen_text, rejected_text) of one row."""
    user = {"role": "user", "content": _text(row, columns.prompt, "prompt_key", where)}
    chosen = _text(row, columns.chosen, "chosen_key", where)
    rejected = _text(row, columns.rejected, "rejected_key", where)
    return (
        render([user]),
        render([user, {"role": "assistant", "content": chosen}]),
        render([user, {"role": "assistant", "content": rejected}]),
    )


def encode_pairs(rows: list[tuple[str, dict]], columns: Columns, tokenizer, chat_template: str | None) -> list:
    """(where, row) → EncodedPair each; tokenized as ROLL does (the tokenizer's own special tokens added)."""
    render = renderer(tokenizer, chat_template)
    texts = [pair_texts(row, columns, render, where) for where, row in rows]
    if not texts:
        return []
    prompts, chosen, rejected = (tokenizer([t[i] for t in texts])["input_ids"] for i in range(3))
    return [
        EncodedPair(list(c), list(r), len(p), where)
        for (where, _), p, c, r in zip(rows, prompts, chosen, rejected, strict=True)
    ]


def read_rows(file_name, key: str, num_proc: int | None = None) -> list[tuple[str, dict]]:
    """(where, row) of every row of the data file(s) `file_name` (one format: .json, .jsonl, .csv, .parquet)."""
    import datasets

    files = [file_name] if isinstance(file_name, str) else list(file_name)
    kind = _builder_for(files)  # extension, regular file, existence: each named
    rows = []
    for name in files:
        try:
            table = datasets.load_dataset(kind, data_files=[name], split="train", num_proc=num_proc)
        except Exception as error:  # datasets' own message rarely names the file
            raise InputError(
                f"'{key}.file_name': {name} could not be read as {kind} ({type(error).__name__}: {error}); rows "
                f"look like {ROW_EXAMPLE}"
            ) from error
        rows.extend((f"{name} row {index}", row) for index, row in enumerate(table))
    if not rows:
        raise InputError(f"'{key}.file_name' = {files}: no rows; rows look like {ROW_EXAMPLE}")
    return rows


def load_pairs(data_args, key: str, columns: Columns, tokenizer, chat_template, sequence_length: int) -> list:
    """Every pair of `data_args.file_name` that fits sequence_length, encoded (EncodedPair); `key` names the block."""
    encoded = encode_pairs(read_rows(data_args.file_name, key, data_args.preprocessing_num_workers), columns,
                           tokenizer, chat_template)  # fmt: skip
    kept = [p for p in encoded if max(len(p.chosen_ids), len(p.rejected_ids)) <= sequence_length]
    if len(kept) < len(encoded):
        first = next(p for p in encoded if p not in kept)
        logger.warning(
            "%s: %d of %d pairs dropped, their chosen or rejected text is longer than sequence_length = %d tokens "
            "(as ROLL drops them); first: %s",
            key, len(encoded) - len(kept), len(encoded), sequence_length, first.where,
        )  # fmt: skip
    if not kept:
        raise InputError(
            f"'{key}.file_name': every pair is longer than sequence_length = {sequence_length} tokens (prompt + "
            "answer, chat template included); raise sequence_length"
        )
    return kept


def _padded(sequences: list[list[int]], width: int, pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        mask[row, : len(sequence)] = 1
    return ids, mask


def collate(pairs: list, sequence_length: int, pad_token_id: int) -> DataProto:
    """EncodedPairs → the interleaved DPO batch: input_ids, attention_mask, position_ids (2P, sequence_length),
    prompt_id_lens (2P,)."""
    chosen_ids, chosen_mask = _padded([p.chosen_ids for p in pairs], sequence_length, pad_token_id)
    rejected_ids, rejected_mask = _padded([p.rejected_ids for p in pairs], sequence_length, pad_token_id)
    prompt_lens = torch.tensor([p.prompt_id_len for p in pairs], dtype=torch.long)
    mask = interleave_pairs(chosen_mask, rejected_mask)
    return DataProto.from_dict(
        tensors={
            "input_ids": interleave_pairs(chosen_ids, rejected_ids),
            "attention_mask": mask,
            "position_ids": (mask.cumsum(dim=-1) - 1).clamp(min=0),
            "prompt_id_lens": interleave_pairs(prompt_lens, prompt_lens),
        }
    )


def check_template(config, tokenizer_dir: str) -> None:
    """Start-up check: the tokenizer has the template the config names (its own, unless chatml), and a sample
    pair's answer comes after its prompt."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    template = config.actor_train.data_args.chat_template
    if template != "chatml" and not tokenizer.chat_template:
        raise InputError(
            f"the tokenizer of {tokenizer_dir} has no chat template, so the DPO pairs cannot be rendered: set "
            "actor_train.data_args.chat_template: chatml (ROLL: global_template: chatml) or give the tokenizer a "
            "chat_template (tokenizer_config.json)"
        )
    columns = Columns.of(config)
    sample = {columns.prompt: "What is 2 + 3?", columns.chosen: "5", columns.rejected: "6"}
    prompt, chosen, _ = pair_texts(sample, columns, renderer(tokenizer, template), "a sample pair")
    if not chosen.startswith(prompt) or len(chosen) <= len(prompt):
        raise InputError(
            f"the chat template of {tokenizer_dir} does not render a sample pair's answer after its prompt (prompt "
            f"{prompt!r}, with the answer {chosen!r}): the response span would not hold the answer"
        )
