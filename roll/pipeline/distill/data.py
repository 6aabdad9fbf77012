"""Distillation rows → token ids and unshifted labels, ROLL's encoder (docs/distill.md, "Data layout").

Per row the user turn is `"\\n" + question` (ROLL's: DistillConfig has no prompt key, so the encoder's
`prompt + "\\n" + question` starts with the newline; kept) and the assistant turn is the answer.
`prompt_text` = the user turn rendered with the generation prompt; `full_text` = the conversation without it, minus
one trailing newline. The ids are `full_text` tokenized, cut to `sequence_length` and right padded to it (ROLL's
truncation). `labels_for_loss` (unshifted): IGNORE_INDEX up to the end of the first occurrence of the prompt's
tokens, the real tokens after it (every real token with distill_on_prompt); padding is IGNORE_INDEX by the
attention mask (ROLL compares with the pad id: a real token equal to it, e.g. EOS as pad, would lose its label).
Rows with a `split` column other than "train" are dropped, as ROLL's `is_valid_example` does.
"""

import torch

from roll.algorithms.loss_tokens import IGNORE_INDEX
from roll.data.chat_template import render_chat
from roll.data.prompts import CHATML, data_files, read_tables
from roll.distributed.data_proto import DataProto
from roll.utils.errors import InputError
from roll.utils.functional import compute_position_ids
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline.distill")

ROW_EXAMPLE = '{"question": "What is 2 + 3?", "answer": "5"}'
TEMPLATE_ARGS = {"chatml": {"chat_template": CHATML}, "qwen3": {"enable_thinking": True}}  # data_args.chat_template


def conversation(row: dict, question_key: str, answer_key: str, where: str) -> tuple[list, list]:
    """(user turn only, user + assistant turns) of one row, ROLL's layout."""
    for key, name in ((question_key, "question_key"), (answer_key, "answer_key")):
        if key not in row:
            raise InputError(f"{where}: no '{key}' column (the {name} key names it); rows look like {ROW_EXAMPLE}")
    question, answer = row[question_key], row[answer_key]
    for key, value in ((question_key, question), (answer_key, answer)):
        if value is not None and not isinstance(value, str):
            raise InputError(f"{where}: '{key}' = {value!r} ({type(value).__name__}): expected a string")
    user = [{"role": "user", "content": "\n" + question if question else ""}]
    return user, user + ([{"role": "assistant", "content": answer}] if answer else [])


def _find(haystack: list, needle: list) -> int:
    """End of the first occurrence of `needle` in `haystack`, or -1."""
    width = len(needle)
    for start in range(len(haystack) - width + 1):
        if haystack[start : start + width] == needle:
            return start + width
    return -1


def encode_row(row, where, tokenizer, template, question_key, answer_key, sequence_length, distill_on_prompt):
    """One row → (input_ids, attention_mask, labels_for_loss) lists of `sequence_length`, and whether it was cut."""
    user, full = conversation(row, question_key, answer_key, where)
    extra = TEMPLATE_ARGS.get(template, {})
    prompt_text = render_chat(tokenizer, user, add_generation_prompt=True, **extra)
    full_text = render_chat(tokenizer, full, add_generation_prompt=False, **extra)
    if full_text.endswith("\n"):
        full_text = full_text[:-1]
    whole = tokenizer(full_text)["input_ids"]
    encoded = tokenizer(full_text, truncation=True, max_length=sequence_length, padding="max_length")
    ids, mask = list(encoded["input_ids"]), list(encoded["attention_mask"])
    if distill_on_prompt:
        cutoff = 0
    else:
        prompt_ids = tokenizer(prompt_text)["input_ids"]
        cutoff = _find(ids, prompt_ids)
        cutoff = len(prompt_ids) if cutoff < 0 else cutoff
    labels = [token if real and t >= cutoff else IGNORE_INDEX for t, (token, real) in enumerate(zip(ids, mask))]
    return ids, mask, labels, len(whole) > sequence_length


def load_rows(data_args, key: str, config, tokenizer, template) -> list[dict]:
    """Read and encode every row of `data_args.file_name` (`key`: its config key, for errors)."""
    files = data_files(data_args.file_name)
    rows, cut, dropped = [], 0, 0
    for name, table in read_tables(data_args.file_name, data_args.preprocessing_num_workers, "row", ROW_EXAMPLE):
        for index, row in enumerate(table):
            if "split" in row and row["split"] != "train":
                dropped += 1
                continue
            where = f"{name} row {index}"
            ids, mask, labels, was_cut = encode_row(
                row, where, tokenizer, template, config.question_key, config.answer_key, config.sequence_length,
                config.distill_on_prompt,
            )  # fmt: skip
            cut += was_cut
            rows.append({"input_ids": ids, "attention_mask": mask, "labels_for_loss": labels, "where": where})
    if cut:
        logger.warning("%s: %d of %d rows are longer than sequence_length=%d and were cut", files, cut, len(rows),
                       config.sequence_length)  # fmt: skip
    if dropped:
        logger.info("%s: %d rows with a 'split' other than 'train' dropped (ROLL's is_valid_example)", files, dropped)
    if not rows:
        raise InputError(f"{key}: {files} holds no usable rows; rows look like {ROW_EXAMPLE}")
    return rows


def collate(rows: list[dict]) -> DataProto:
    """Encoded rows → the batch: input_ids, attention_mask, position_ids, labels_for_loss (B, sequence_length)."""
    mask = torch.tensor([row["attention_mask"] for row in rows], dtype=torch.long)
    return DataProto.from_dict(
        tensors={
            "input_ids": torch.tensor([row["input_ids"] for row in rows], dtype=torch.long),
            "attention_mask": mask,
            "position_ids": compute_position_ids(mask),
            "labels_for_loss": torch.tensor([row["labels_for_loss"] for row in rows], dtype=torch.long),
        }
    )
