"""Prompt files through `datasets`: formats, columns, chat template, long-prompt policy, row errors."""

import json

import pandas as pd
import pytest

from roll.configs import DataArgs
from roll.data.prompts import PromptSampler, collate_prompts, load_prompt_rows
from roll.demo.tiny_model import build_tokenizer

ROWS = [
    {"prompt": "What is 1 plus 2 ?", "ground_truth": "3", "tag": "math"},
    {"prompt": "What is 2 plus 2 ?", "ground_truth": 4, "tag": "math"},
    {"prompt": " ".join(["What is 1 plus 2 ?"] * 10), "ground_truth": "3", "tag": "math"},
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer([row["prompt"] for row in ROWS])


def write(tmp_path, kind: str, rows=ROWS):
    path = tmp_path / f"prompts.{kind}"
    frame = pd.DataFrame(rows)
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif kind == "json":
        path.write_text(json.dumps(rows))
    elif kind == "csv":
        frame.to_csv(path, index=False)
    else:  # parquet columns have one type
        frame.astype({"ground_truth": str}).to_parquet(path)
    return str(path)


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "parquet"])
def test_every_format_loads_and_long_prompts_are_dropped(tmp_path, tokenizer, kind):
    rows = load_prompt_rows(DataArgs(file_name=write(tmp_path, kind)), tokenizer, prompt_length=20)
    assert [r["ground_truth"] for r in rows] == ["3", "4"]  # the 3rd prompt is too long; truths become text
    assert rows[0]["tag"] == "math"
    assert rows[0]["prompt_text"].startswith("<|user|>") and rows[0]["prompt_text"].endswith("<|assistant|>")
    assert tokenizer.decode(rows[0]["prompt_ids"]) == rows[0]["prompt_text"]


def test_long_prompts_can_be_an_error(tmp_path, tokenizer):
    args = DataArgs(file_name=write(tmp_path, "jsonl"), on_long_prompt="error")
    with pytest.raises(
        ValueError, match=r"1 prompts are longer than prompt_length=20 tokens \(first: \[.*prompts.jsonl row 2.\]\)"
    ):
        load_prompt_rows(args, tokenizer, prompt_length=20)


def test_messages_column_and_plain_prompts(tmp_path, tokenizer):
    rows = [{"messages": [{"role": "user", "content": "What is 1 plus 2 ?"}], "ground_truth": "3"}]
    loaded = load_prompt_rows(DataArgs(file_name=write(tmp_path, "jsonl", rows)), tokenizer, 20)
    assert loaded[0]["prompt_text"] == "<|user|>What is 1 plus 2 ?<|assistant|>" and loaded[0]["tag"] is None
    plain = load_prompt_rows(DataArgs(file_name=write(tmp_path, "csv"), apply_chat_template=False), tokenizer, 20)
    assert plain[0]["prompt_text"] == "What is 1 plus 2 ?"


def test_bad_rows_and_files_are_named(tmp_path, tokenizer):
    bad = write(tmp_path, "jsonl", [{"question": "x", "ground_truth": "1"}])
    with pytest.raises(ValueError, match=r"prompts.jsonl row 0: neither a 'prompt' nor a 'messages' value"):
        load_prompt_rows(DataArgs(file_name=bad), tokenizer, 20)
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_prompt_rows(DataArgs(file_name=str(tmp_path / "nope.jsonl")), tokenizer, 20)
    (tmp_path / "p.txt").write_text("x")
    with pytest.raises(ValueError, match=r"unsupported extension '.txt'"):
        load_prompt_rows(DataArgs(file_name=str(tmp_path / "p.txt")), tokenizer, 20)


def test_collate_left_pads_and_sampler_resumes_exactly(tokenizer):
    rows = [
        {"prompt_ids": [5, 6], "prompt_text": "a", "ground_truth": "1", "tag": None},
        {"prompt_ids": [7], "prompt_text": "b", "ground_truth": "2", "tag": None},
    ]
    batch = collate_prompts(rows, prompt_length=3, pad_token_id=0)
    assert batch.batch["prompts"].tolist() == [[0, 5, 6], [0, 0, 7]]
    assert batch.batch["attention_mask"].tolist() == [[0, 1, 1], [0, 0, 1]]
    items = [{"i": i} for i in range(5)]
    first = PromptSampler(items, seed=3)
    drawn = [r["i"] for r in first.next_rows(7)]  # crosses an epoch boundary
    assert sorted(drawn[:5]) == [0, 1, 2, 3, 4]
    resumed = PromptSampler(items, seed=3)
    resumed.load_state_dict(first.state_dict())
    assert [r["i"] for r in resumed.next_rows(6)] == [r["i"] for r in first.next_rows(6)]
