"""Mixing training prompts by file (interleave_probs) and by reward domain (domain_interleave_probs), and the
named chat templates (data_args.chat_template)."""

import json
from collections import Counter

import pytest

from roll.configs import ConfigError, DataArgs
from roll.data.prompts import MixedPromptSampler, load_prompt_rows, prompt_sampler
from roll.demo.tiny_model import build_tokenizer


def rows(domain: str, n: int) -> list[dict]:
    return [{"i": f"{domain}{k}", "domain": domain} for k in range(n)]


def test_domain_quota_is_exact_every_batch_and_the_rest_goes_to_the_last_pool_in_use():
    pools = {"math": rows("math", 7), "code": rows("code", 5), "judge": rows("judge", 3), "off": rows("off", 2)}
    sampler = MixedPromptSampler(pools, {"math": 0.5, "code": 0.3, "judge": 0.2, "off": 0.0}, seed=1, mode="quota")
    for _ in range(4):  # 0.5·9 → 4, 0.3·9 → 2, 0.2·9 → 1, and the 2 left over go to judge (off has p = 0)
        assert Counter(r["domain"] for r in sampler.next_rows(9)) == {"math": 4, "code": 2, "judge": 3}


def test_file_draw_follows_the_probabilities_and_a_resume_redraws_the_same():
    pools = {0: rows("a", 10), 1: rows("b", 10)}
    sampler = MixedPromptSampler(pools, {0: 0.8, 1: 0.2}, seed=3, mode="draw")
    counts = Counter(r["domain"] for _ in range(50) for r in sampler.next_rows(20))
    assert 0.75 < counts["a"] / 1000 < 0.85
    resumed = MixedPromptSampler(pools, {0: 0.8, 1: 0.2}, seed=3, mode="draw")
    resumed.load_state_dict(sampler.state_dict())
    assert [r["i"] for r in resumed.next_rows(20)] == [r["i"] for r in sampler.next_rows(20)]


def test_prompt_sampler_refuses_rows_it_could_never_draw_and_empty_pools():
    data = rows("math", 3) + rows("code", 3)
    with pytest.raises(ValueError, match=r"rows of \['code'\] but no probability for them"):
        prompt_sampler(data, DataArgs(domain_interleave_probs={"math": 1.0}), seed=0)
    with pytest.raises(ValueError, match=r"no rows for \['judge'\]"):
        prompt_sampler(data, DataArgs(domain_interleave_probs={"math": 0.5, "code": 0.3, "judge": 0.2}), seed=0)
    plain = prompt_sampler(data, DataArgs(), seed=0)
    assert sorted(r["i"] for r in plain.next_rows(6)) == sorted(r["i"] for r in data)


def test_interleave_probs_take_roll_string_form_and_are_validated():
    assert DataArgs(file_name=["a.jsonl", "b.jsonl"], interleave_probs="0.7,0.3").interleave_probs == [0.7, 0.3]
    with pytest.raises(ConfigError, match="2 entries for 3 file_name entries"):
        DataArgs(file_name=["a.jsonl", "b.jsonl", "c.jsonl"], interleave_probs=[0.5, 0.5])
    with pytest.raises(ConfigError, match="set one of 'interleave_probs'"):
        DataArgs(file_name=["a.jsonl", "b.jsonl"], interleave_probs=[0.5, 0.5], domain_interleave_probs={"math": 1.0})
    # ROLL's "1.0" for any number of files: one pool, so it combines with domain mixing
    one_pool = DataArgs(file_name=["a.jsonl", "b.jsonl"], interleave_probs="1.0", domain_interleave_probs={"m": 1.0})
    assert one_pool.interleave_probs is None


def test_rows_know_their_file_and_files_mix_by_probability(tmp_path):
    names = []
    for k, word in enumerate(("one", "two")):
        path = tmp_path / f"p{k}.jsonl"
        path.write_text("".join(json.dumps({"prompt": f"{word} {i}", "ground_truth": "1"}) + "\n" for i in range(4)))
        names.append(str(path))
    tokenizer = build_tokenizer(["one two 0 1 2 3"])
    args = DataArgs(file_name=names, interleave_probs=[1.0, 0.0], preprocessing_num_workers=1)
    loaded = load_prompt_rows(args, tokenizer, prompt_length=20)
    assert [r["source"] for r in loaded] == [0] * 4 + [1] * 4
    picked = prompt_sampler(loaded, args, seed=0).next_rows(6)
    assert {r["source"] for r in picked} == {0}


THINKING = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    "{% if enable_thinking is defined and enable_thinking %}<think>{% endif %}"
)


@pytest.mark.parametrize(
    "chat_template,expected",
    [
        (None, "[user]2 plus 2"),
        ("qwen3", "[user]2 plus 2<think>"),
        ("chatml", "<|im_start|>user\n2 plus 2<|im_end|>\n<|im_start|>assistant\n"),
    ],
)
def test_named_chat_templates(tmp_path, chat_template, expected):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "2 plus 2", "ground_truth": "4"}) + "\n")
    tokenizer = build_tokenizer(["2 plus 2"])
    tokenizer.chat_template = THINKING
    args = DataArgs(file_name=str(path), chat_template=chat_template)
    assert load_prompt_rows(args, tokenizer, prompt_length=64)[0]["prompt_text"] == expected
