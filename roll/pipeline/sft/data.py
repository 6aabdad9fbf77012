"""SFT rows → token ids and labels, ROLL's encoder (docs/sft.md, "What one step computes").

Per row the conversation is an optional system turn (where the system column is non-empty), the user turn
`prompt + "\\n" + query` (the query only where non-empty) and, for the full text, the assistant's response.
`prompt_text` = the conversation without the answer rendered with the generation prompt; `full_text` = with the
answer, without the generation prompt, minus one trailing newline (templates such as Qwen's end the turn with
one). The labels are IGNORE_INDEX over the first len(tokenize(prompt_text)) tokens and the tokens themselves after
them: the response and its end-of-turn token are supervised, the assistant header is not. A row longer than
`sequence_length` is an error naming it (ROLL's collator would build ragged tensors from it).
"""

from dataclasses import dataclass

from roll.algorithms.sft import mask_prompt_labels, sft_collate
from roll.data.chat_template import render_chat
from roll.data.prompts import CHATML, data_files, read_tables
from roll.distributed.data_proto import DataProto
from roll.utils.errors import InputError
from roll.utils.logging import get_logger

logger = get_logger("roll.pipeline.sft")

ROW_EXAMPLE = '{"instruction": "What is 2 + 3?", "output": "5"}'
TEMPLATE_ARGS = {"chatml": {"chat_template": CHATML}, "qwen3": {"enable_thinking": True}}  # data_args.chat_template
SHOWN = 5  # rows named in an error about several


@dataclass(frozen=True)
class Columns:
    """The dataset columns of a row (ROLL's system_key, prompt_key, query_key, response_key)."""

    prompt: str = "instruction"
    response: str = "output"
    system: str | None = None
    query: str | None = None

    @classmethod
    def of(cls, config) -> "Columns":
        return cls(config.prompt_key, config.response_key, config.system_key, config.query_key)


@dataclass
class EncodedRow:
    input_ids: list[int]
    labels: list[int]  # unshifted: IGNORE_INDEX over the prompt, the token ids after it
    where: str  # file and row, for errors


def _text(row: dict, key: str, column: str, where: str, required: bool) -> str | None:
    """The row's `key` column (`column`: the config key naming it): a string, or None where empty and optional."""
    if key not in row:
        raise InputError(
            f"{where}: no '{key}' column (the {column} key names it); set {column} to your column's name, rows look "
            f"like {ROW_EXAMPLE}"
        )
    value = row[key]
    if value is None or value == "":
        if required:
            raise InputError(f"{where}: '{key}' ({column}) is empty; every row needs one")
        return None
    if not isinstance(value, str):
        raise InputError(f"{where}: '{key}' ({column}) = {value!r} ({type(value).__name__}): expected text")
    return value


def conversation(row: dict, columns: Columns, where: str) -> tuple[list[dict], str]:
    """(the messages before the answer, the answer) of one row, as ROLL builds them."""
    messages = []
    if columns.system is not None:
        system = _text(row, columns.system, "system_key", where, required=False)
        if system:
            messages.append({"role": "system", "content": system})
    prompt = _text(row, columns.prompt, "prompt_key", where, required=columns.query is None) or ""
    if columns.query is not None:
        query = _text(row, columns.query, "query_key", where, required=False)
        if query:
            prompt = prompt + "\n" + query
    if not prompt:
        raise InputError(f"{where}: the user turn is empty (no '{columns.prompt}' and no '{columns.query}' text)")
    messages.append({"role": "user", "content": prompt})
    return messages, _text(row, columns.response, "response_key", where, required=True)


def renderer(tokenizer, chat_template: str | None):
    """render(messages, add_generation_prompt) → text, with the configured template (TEMPLATE_ARGS)."""
    extra = TEMPLATE_ARGS.get(chat_template, {})

    def render(messages: list[dict], add_generation_prompt: bool) -> str:
        return render_chat(tokenizer, messages, add_generation_prompt=add_generation_prompt, **extra)

    return render


def row_texts(row: dict, columns: Columns, render, where: str) -> tuple[str, str]:
    """(prompt_text, full_text) of one row (the module docstring's layout)."""
    messages, response = conversation(row, columns, where)
    prompt_text = render(messages, True)
    full_text = render([*messages, {"role": "assistant", "content": response}], False)
    return prompt_text, full_text.removesuffix("\n")  # one trailing newline, as ROLL strips it


def encode_rows(rows: list[tuple[str, dict]], columns: Columns, tokenizer, chat_template: str | None) -> list:
    """(where, row) pairs → EncodedRow each. Tokenized as ROLL does (the tokenizer's own special tokens added)."""
    render = renderer(tokenizer, chat_template)
    texts = [row_texts(row, columns, render, where) for where, row in rows]
    if not texts:
        return []
    prompt_ids = tokenizer([prompt for prompt, _ in texts])["input_ids"]
    full_ids = tokenizer([full for _, full in texts])["input_ids"]
    encoded, unaligned = [], []
    for (where, _), prompt, ids in zip(rows, prompt_ids, full_ids, strict=True):
        try:
            labels = mask_prompt_labels(ids, len(prompt))
        except InputError as error:
            raise InputError(f"{where}: {error}") from None
        if ids[: len(prompt)] != prompt:
            unaligned.append(where)
        encoded.append(EncodedRow(list(ids), labels, where))
    if unaligned:  # ROLL masks by the prompt's token count anyway; the boundary may be a token off
        logger.warning(
            "%d rows: the prompt's tokens are not a prefix of the full text's (the template or a BPE merge joins "
            "them), so the first supervised token may be off by one, as in ROLL; first: %s",
            len(unaligned),
            unaligned[:SHOWN],
        )
    return encoded


def load_rows(data_args, key: str, columns: Columns, tokenizer, chat_template, sequence_length: int) -> list:
    """Every row of `data_args.file_name` encoded (EncodedRow); `key` names the block in errors. Rows longer than
    sequence_length are one error naming them."""
    rows = []
    files = data_files(data_args.file_name)
    for name, table in read_tables(files, data_args.preprocessing_num_workers, "example", ROW_EXAMPLE):
        rows.extend((f"{name} row {index}", row) for index, row in enumerate(table))
    if not rows:
        raise InputError(f"'{key}.file_name' = {files}: no rows")
    encoded = encode_rows(rows, columns, tokenizer, chat_template)
    too_long = [(row.where, len(row.input_ids)) for row in encoded if len(row.input_ids) > sequence_length]
    if too_long:
        named = ", ".join(f"{where} ({length} tokens)" for where, length in too_long[:SHOWN])
        more = f" and {len(too_long) - SHOWN} more" if len(too_long) > SHOWN else ""
        raise InputError(
            f"'{key}.file_name': {len(too_long)} rows are longer than sequence_length = {sequence_length} tokens "
            f"(prompt + response, chat template included): {named}{more}; raise sequence_length or shorten or drop "
            "those rows"
        )
    return encoded


def collate(rows: list, sequence_length: int, pad_token_id: int) -> DataProto:
    """EncodedRows → the SFT batch (roll.algorithms.sft.sft_collate: right padded, labels shifted left)."""
    tensors = sft_collate([r.input_ids for r in rows], [r.labels for r in rows], sequence_length, pad_token_id)
    return DataProto.from_dict(tensors=tensors)


def check_template(config, tokenizer_dir: str) -> None:
    """Start-up check: the tokenizer has the template the config names (its own, unless chatml), and it renders a
    sample conversation whose prompt comes before its answer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    template = config.sft_train.data_args.chat_template
    if template != "chatml" and not tokenizer.chat_template:
        raise InputError(
            f"the tokenizer of {tokenizer_dir} has no chat template, so the SFT rows cannot be rendered: set "
            "sft_train.data_args.chat_template: chatml (ROLL: data_args.template: chatml) or give the tokenizer a "
            "chat_template (tokenizer_config.json)"
        )
    sample = {config.prompt_key: "What is 2 + 3?", config.response_key: "5"}
    for column in (config.system_key, config.query_key):
        if column is not None:
            sample[column] = ""
    prompt_text, full_text = row_texts(sample, Columns.of(config), renderer(tokenizer, template), "a sample row")
    if len(full_text) <= len(prompt_text.rstrip("\n")):
        raise InputError(
            f"the chat template of {tokenizer_dir} renders the answer of a sample row nowhere after its prompt "
            f"(prompt {prompt_text!r}, with the answer {full_text!r}): no token would be supervised"
        )
