"""Tiny random-init vision-language models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) with their processors, built in code
(no model hub): a small vision tower (2 blocks, width 32), a 2-layer language model (hidden 64, head_dim 32 as
vLLM-CPU needs), a byte-level BPE vocabulary of a few hundred tokens with the Qwen-VL vision tokens, an image
processor that turns a 56×56 image into 16 patches (4 image tokens after the 2×2 merge) and a chat template with
image placeholders. Saved with save_pretrained; loaded back with AutoModelForImageTextToText and
roll.models.vl.load_processor.
"""

from pathlib import Path

from roll.demo.tiny_model import ASSISTANT, EOS, USER, build_tokenizer

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"
VISION_TOKENS = (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)
# A user turn's content is a string or a list of parts ({"type": "image"}, {"type": "video"}, {"type": "text"}),
# as ROLL's VL prompts are; each image becomes <|vision_start|><|image_pad|><|vision_end|>, which the processor
# expands into one <|image_pad|> per merged patch.
VL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}" + USER + ""
    "{% elif message['role'] == 'assistant' %}" + ASSISTANT + "{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}" + VISION_START + IMAGE_PAD + VISION_END + ""
    "{% elif part['type'] == 'video' %}" + VISION_START + VIDEO_PAD + VISION_END + ""
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}" + EOS + "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)
PATCH = {"qwen2_vl": 14, "qwen2_5_vl": 14, "qwen3_vl": 16}


def _configs(model_type: str, tokenizer, hidden_size: int, num_layers: int) -> object:
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in VISION_TOKENS}
    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden_size // 32,
        num_key_value_heads=hidden_size // 32,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        # M-RoPE: the 16 rotary frequency pairs of a 32-wide head split over (temporal, height, width)
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]},
    )
    common = dict(
        image_token_id=ids[IMAGE_PAD],
        video_token_id=ids[VIDEO_PAD],
        vision_start_token_id=ids[VISION_START],
        vision_end_token_id=ids[VISION_END],
        tie_word_embeddings=False,  # vLLM reloads of tied weights are a known stale-weight trap (tiny_model.py)
    )
    vision = dict(depth=2, num_heads=2, patch_size=PATCH[model_type], spatial_merge_size=2, temporal_patch_size=2)
    if model_type == "qwen2_vl":
        vision.update(embed_dim=32, hidden_size=hidden_size, mlp_ratio=2)
        return Qwen2VLConfig(text_config=text, vision_config=vision, **common)
    if model_type == "qwen2_5_vl":
        vision.update(hidden_size=32, intermediate_size=64, out_hidden_size=hidden_size, window_size=56)
        return Qwen2_5_VLConfig(text_config=text, vision_config={**vision, "fullatt_block_indexes": [1]}, **common)
    if model_type == "qwen3_vl":
        text.update(head_dim=32)
        text["rope_parameters"] = {**text["rope_parameters"], "mrope_interleaved": True}
        vision.update(hidden_size=32, intermediate_size=64, out_hidden_size=hidden_size, num_position_embeddings=64)
        return Qwen3VLConfig(text_config=text, vision_config={**vision, "deepstack_visual_indexes": [1]}, **common)
    raise ValueError(f"tiny VL model_type {model_type!r}; valid: {sorted(PATCH)}")


def build_tiny_vl_model(
    output_dir: str,
    texts: list[str],
    model_type: str = "qwen2_vl",
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    max_image_tokens: int = 16,
) -> Path:
    """Writes an HF folder (config, weights, processor: image processor, tokenizer, chat template) of a random
    tiny VL model of `model_type`; returns its path. Images are resized to at most `max_image_tokens` merged
    patches (the processor's max_pixels) and at least one (2×2 patches)."""
    import torch
    from transformers import AutoModelForImageTextToText
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from roll.models.vl import image_only_processor, processor_class

    if hidden_size % 32:
        raise ValueError(f"hidden_size={hidden_size}: heads of 32 (vLLM-CPU needs head_dim >= 32)")
    tokenizer = build_tokenizer(texts, extra_special_tokens=VISION_TOKENS)
    config = _configs(model_type, tokenizer, hidden_size, num_layers)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    factor = PATCH[model_type] * 2  # one merged patch is factor × factor pixels
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=PATCH[model_type],
        merge_size=2,
        temporal_patch_size=2,
        size={"shortest_edge": factor * factor, "longest_edge": factor * factor * max_image_tokens},
    )
    tokenizer.chat_template = None  # the processor's template (chat_template.jinja) is the one
    processor = image_only_processor(processor_class(model_type))(
        image_processor, tokenizer, chat_template=VL_CHAT_TEMPLATE
    )
    out = Path(output_dir)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)  # tokenizer_config.json keeps the template-less tokenizer's settings
    return out
