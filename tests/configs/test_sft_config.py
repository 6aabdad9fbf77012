"""The SFT kind's config and row encoding (no Ray, no model): ROLL's layout of a row (docs/sft.md) with the label
mask, ROLL's key spellings, and the strict loader's errors naming the key or row."""

import json
from pathlib import Path

import pytest

from roll.algorithms.loss_tokens import IGNORE_INDEX
from roll.configs import ConfigError, compose_config, load_config
from roll.pipeline.sft.config import SFTConfig, SFTDataArgs
from roll.pipeline.sft.data import Columns, encode_rows, load_rows
from roll.utils.errors import InputError

SFT_DEMO = Path(__file__).resolve().parents[2] / "examples" / "sft_demo"
ROW = {"instruction": "What is 2 plus 3 ?", "input": "in words", "system": "Be brief .", "output": "\\boxed{5}"}
COLUMNS = Columns("instruction", "output", "system", "input")


@pytest.fixture(scope="module")
def tokenizer():
    from roll.demo.tiny_model import build_tokenizer

    texts = [*ROW.values(), "system\nuser\nassistant\n"]
    return build_tokenizer(texts, extra_special_tokens=("<|im_start|>", "<|im_end|>"))


def test_rows_are_rolls_layout_with_the_prompt_masked(tokenizer):
    """chatml: system turn where non-empty, user = prompt + "\\n" + query (query where non-empty), the answer
    and its end-of-turn token supervised, the assistant header and the template's last newline not."""
    full, bare = encode_rows([("r0", ROW), ("r1", dict(ROW, input="", system=""))], COLUMNS, tokenizer, "chatml")
    assert tokenizer.decode(full.input_ids) == (
        "<|im_start|>system\nBe brief .<|im_end|>\n<|im_start|>user\nWhat is 2 plus 3 ?\nin words<|im_end|>\n"
        "<|im_start|>assistant\n\\boxed{5}<|im_end|>"
    )
    assert tokenizer.decode(bare.input_ids) == (
        "<|im_start|>user\nWhat is 2 plus 3 ?<|im_end|>\n<|im_start|>assistant\n\\boxed{5}<|im_end|>"
    )
    for row in (full, bare):
        answer = len(tokenizer("\\boxed{5}<|im_end|>")["input_ids"])
        assert row.labels == [IGNORE_INDEX] * (len(row.input_ids) - answer) + row.input_ids[-answer:]


def test_missing_column_and_overlong_rows_name_the_row(tokenizer, tmp_path):
    with pytest.raises(InputError, match="r0: no 'input' column \\(the query_key key names it\\)"):
        encode_rows([("r0", {"instruction": "x", "output": "y"})], Columns(query="input"), tokenizer, "chatml")
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in (ROW, dict(ROW, output="\\boxed{5} " * 20))) + "\n")
    with pytest.raises(InputError, match=f"1 rows are longer than sequence_length = 40 tokens.*{data} row 1 "):
        load_rows(SFTDataArgs(file_name=str(data)), "sft_train.data_args", COLUMNS, tokenizer, "chatml", 40)


def _load(*overrides):
    return load_config(SFTConfig, compose_config(str(SFT_DEMO), "sft_tiny", list(overrides)))


def test_demo_config_and_rolls_spellings():
    config = _load("+sft_train.data_args.template=qwen2_5", "+validation.data_args.template=qwen2_5")
    assert config.sft_train.data_args.chat_template is None  # ROLL's qwen2_5 = the tokenizer's own template
    assert config.global_batch_size == 32 and config.optimizer_steps() == {"sft_train": 1}
    chatml = _load("+sft_train.data_args.template=chatml", "+validation.data_args.template=chatml")
    assert chatml.sft_train.data_args.chat_template == "chatml"


@pytest.mark.parametrize(
    "override, message",
    [
        ("+sft_train.data_args.bogus=1", "bogus"),
        ("sequence_length=null", "'sequence_length' is required"),
        ("sft_train.data_args.apply_chat_template=false", "apply_chat_template' = false"),
        ("validation.data_args.chat_template=chatml", "differs from 'sft_train.data_args.chat_template'"),
    ],
)
def test_bad_keys_are_errors_naming_them(override, message):
    with pytest.raises(ConfigError, match=message):
        _load(override)
