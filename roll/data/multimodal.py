"""Vision-language prompts: images loaded from ROLL's VL dataset columns, the model's processor run once per row.

A row's images come as file paths (relative ones under `image_folder`), raw bytes, `datasets` Image features
(decoded PIL images, or undecoded {"bytes", "path"} dicts) or PIL images, alone or in a list. The prompt is a
string (the images go first, or where the string holds ROLL's `<image>` placeholder) or chat messages with
{"type": "image"} parts. `encode_vl_row` applies the chat template and runs the processor once, giving:

    prompt_ids          the prompt's token ids, each image placeholder expanded to one token per merged patch
    multi_modal_inputs  {"pixel_values": (patches, C·T·P·P) in the model's dtype, "image_grid_thw": (images, 3)}
                        — what the training and scoring forwards take (ROLL's `multi_modal_inputs`)
    multi_modal_data    {"image": [PIL images]} — what vLLM takes (it runs the same processor on them)

`collate_vl_prompts` lays rows out as docs/contracts.md's prompt batch, the two dicts as non-tensor per-row
objects. A row longer than `prompt_length` after its image tokens is named (file, row, length). Videos are
refused with the reason (roll.models.vl.video_refusal).
"""

import io
from pathlib import Path

import numpy as np
import torch

from roll.distributed.data_proto import DataProto
from roll.utils.errors import InputError
from roll.utils.functional import left_pad

PROMPT_IMAGE_TOKEN = "<image>"  # ROLL's placeholder for an image inside a prompt string
MM_INPUTS, MM_DATA = "multi_modal_inputs", "multi_modal_data"


def load_image(value, where: str, image_folder: str | None = None):
    """One image as an RGB PIL image from a path, bytes, a `datasets` Image dict or a PIL image."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, dict) and ("bytes" in value or "path" in value):  # an undecoded datasets Image
        value = value.get("bytes") or value.get("path")
    try:
        if isinstance(value, (bytes, bytearray)):
            return Image.open(io.BytesIO(value)).convert("RGB")
        if isinstance(value, (str, Path)):
            path = Path(image_folder) / value if image_folder and not Path(value).is_absolute() else Path(value)
            if not path.is_file():
                raise InputError(f"{where}: image file {str(path)!r} does not exist")
            return Image.open(path).convert("RGB")
    except InputError:
        raise
    except Exception as error:  # PIL's own errors do not name the row
        raise InputError(f"{where}: the image could not be read ({type(error).__name__}: {error})") from None
    raise InputError(
        f"{where}: an image must be a file path, bytes, a datasets Image or a PIL image, got {type(value).__name__}"
    )


def row_images(value, where: str, image_folder: str | None = None) -> list:
    """A row's images (None or an empty list: none)."""
    if value is None:
        return []
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return [load_image(item, f"{where} image {index}", image_folder) for index, item in enumerate(values)]


def vl_messages(prompt, image_count: int, where: str) -> list:
    """Chat messages for a prompt string (the images first, or at each `<image>`) or chat messages as they are;
    the number of image parts must equal the row's images."""
    if isinstance(prompt, str):
        if PROMPT_IMAGE_TOKEN in prompt:
            pieces = prompt.split(PROMPT_IMAGE_TOKEN)
            content = [{"type": "text", "text": pieces[0]}] if pieces[0] else []
            for piece in pieces[1:]:
                content.append({"type": "image"})
                if piece:
                    content.append({"type": "text", "text": piece})
        else:
            content = [{"type": "image"}] * image_count + [{"type": "text", "text": prompt}]
        messages = [{"role": "user", "content": content}]
    elif isinstance(prompt, (list, tuple)) and all(isinstance(m, dict) for m in prompt):
        messages = list(prompt)
    else:
        raise InputError(f"{where}: the prompt must be a string or chat messages, got {type(prompt).__name__}")
    parts = sum(
        1
        for message in messages
        if not isinstance(message.get("content"), str)
        for part in message.get("content") or []
        if part.get("type") == "image"
    )
    if parts != image_count:
        raise InputError(f"{where}: the prompt has {parts} image placeholders but the row has {image_count} images")
    return messages


def encode_vl_row(processor, prompt, images: list, *, prompt_length: int, dtype: torch.dtype, where: str) -> dict:
    """Template + processor for one row (see the module docstring); an InputError names a row longer than
    `prompt_length` tokens after its image tokens."""
    messages = vl_messages(prompt, len(images), where)
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    encoded = processor(text=[text], images=images or None, return_tensors="pt")
    ids = encoded["input_ids"][0].tolist()
    if len(ids) > prompt_length:
        raise PromptTooLong(where, len(ids), prompt_length)
    inputs = {}
    if images:
        inputs = {
            "pixel_values": encoded["pixel_values"].to(dtype),
            "image_grid_thw": encoded["image_grid_thw"].long(),
        }
    return {
        "prompt_ids": ids,
        "prompt_text": text,
        MM_INPUTS: inputs,
        MM_DATA: {"image": images} if images else {},
    }


class PromptTooLong(InputError):
    def __init__(self, where: str, length: int, prompt_length: int):
        self.where, self.length = where, length
        super().__init__(
            f"{where}: {length} tokens with its image tokens, longer than prompt_length={prompt_length}; raise "
            f"prompt_length, shrink the images (the processor's max_pixels) or drop the row"
        )


def _value(row: dict, key: str | None):
    """A column value; a dotted key reads into a dict column (ROLL's reward_model.ground_truth)."""
    if key is None:
        return None
    value = row
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def encode_vl_rows(
    table,
    processor,
    *,
    source: str,
    prompt_length: int,
    dtype: torch.dtype,
    prompt_key: str = "prompt",
    image_key: str = "images",
    ground_truth_key: str | None = "ground_truth",
    tag_key: str | None = "tag",
    video_keys: tuple[str, ...] = ("video", "videos"),
    image_folder: str | None = None,
    on_long_prompt: str = "error",
    video_refusal: str | None = None,
) -> tuple[list[dict], list[tuple[str, int]]]:
    """Every row of `table` (a `datasets` Dataset, or any sequence of dicts) encoded once: (rows, too long), where
    too long lists (where, length) of the rows over `prompt_length` — an InputError naming them with
    on_long_prompt "error", dropped with "drop". A row with a video is refused with `video_refusal`."""
    if on_long_prompt not in ("error", "drop"):
        raise ValueError(f"on_long_prompt={on_long_prompt!r}; valid: ['error', 'drop']")
    rows, too_long = [], []
    for index, row in enumerate(table):
        where = f"{source} row {index}"
        videos = [key for key in video_keys if row.get(key)]
        if videos:
            raise InputError(f"{where}: column {videos[0]!r} holds a video, which is refused: {video_refusal}")
        images = row_images(row.get(image_key), where, image_folder)
        try:
            encoded = encode_vl_row(
                processor, row.get(prompt_key), images, prompt_length=prompt_length, dtype=dtype, where=where
            )
        except PromptTooLong as error:
            too_long.append((error.where, error.length))
            continue
        truth = _value(row, ground_truth_key)
        encoded.update(ground_truth=None if truth is None else str(truth), tag=_value(row, tag_key), where=where)
        rows.append(encoded)
    if too_long and on_long_prompt == "error":
        shown = ", ".join(f"{where} ({length} tokens)" for where, length in too_long[:5])
        raise InputError(
            f"{source}: {len(too_long)} prompts are longer than prompt_length={prompt_length} tokens with their image "
            f"tokens: {shown}; raise prompt_length, shrink the images (the processor's max_pixels) or set "
            f"data_args.on_long_prompt: drop"
        )
    return rows, too_long


def collate_vl_prompts(rows: list[dict], prompt_length: int, pad_token_id: int) -> DataProto:
    """The prompt batch of docs/contracts.md (left-padded `prompts`, `attention_mask`) plus the per-row
    `multi_modal_inputs` and `multi_modal_data` and the texts, ground truths and tags as non-tensors."""
    prompts, mask = left_pad([row["prompt_ids"] for row in rows], pad_token_id, width=prompt_length)
    non_tensors = {}
    for key in ("prompt_text", "ground_truth", "tag", MM_INPUTS, MM_DATA):
        column = np.empty(len(rows), dtype=object)
        column[:] = [row.get(key) for row in rows]
        non_tensors[key] = column
    return DataProto.from_dict(tensors={"prompts": prompts, "attention_mask": mask}, non_tensors=non_tensors)
