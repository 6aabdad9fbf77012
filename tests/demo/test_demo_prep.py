"""The demo's task split, tokenizer round trip and preparation marker."""

import json

from transformers import AutoTokenizer

from roll.demo import task as demo_task
from roll.demo.rlvr import MARKER, DemoSettings, is_prepared, prepare_demo
from roll.demo.tiny_model import build_tiny_model
from roll.utils.math_grader import grade


def test_heldout_phrasings_never_occur_in_training():
    train, heldout = demo_task.split_problems(seed=3)
    train_phrasings = {p["phrasing"] for p in train}
    assert len(heldout) == 12 * 16
    assert not train_phrasings & {p["phrasing"] for p in heldout}
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in heldout}
    assert all(int(p["ground_truth"]) == sum(p["operands"]) for p in train + heldout)


def test_reading_warm_start_material_has_no_sums():
    reading = demo_task.reading_problems()
    task_prompts = {p["prompt"] for p in demo_task.all_problems()}
    assert not task_prompts & {r["prompt"] for r in reading}
    for r in reading:
        numbers = [w for w in r["prompt"].split() if w.isdigit()]
        assert numbers == [r["ground_truth"]]


def test_tokenizer_round_trips_through_auto_tokenizer(tmp_path):
    path = build_tiny_model(str(tmp_path / "m"), demo_task.tokenizer_corpus())
    tokenizer = AutoTokenizer.from_pretrained(path)  # transformers 5 picks Qwen2Tokenizer for qwen2 configs
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tom has 3 apples and finds 4 more ."}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(prompt + demo_task.answer_text(7) + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert "Tom" in tokens and "Ġapples" in tokens and "3" in tokens  # whole words survive
    reply = tokenizer.decode(
        ids[len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) :], skip_special_tokens=True
    )
    assert reply == "\\boxed{7}" and grade(reply, "7") == 1.0
    assert tokenizer.pad_token_id == 0 and tokenizer.eos_token_id == 1


def test_prepare_is_skipped_when_settings_match(tmp_path):
    settings = DemoSettings(warm_start_steps=2)
    first = prepare_demo(tmp_path, settings, log=lambda *_: None)
    assert not first["skipped"] and (tmp_path / "model" / "config.json").is_file()
    rows = [json.loads(line) for line in open(tmp_path / "train.jsonl")]
    assert set(rows[0]) == {"prompt", "ground_truth", "tag"}
    assert prepare_demo(tmp_path, settings, log=lambda *_: None)["skipped"]
    assert is_prepared(tmp_path, DemoSettings(warm_start_steps=3)) is None
    marker = json.loads((tmp_path / MARKER).read_text())
    assert marker["settings"]["warm_start_steps"] == 2
