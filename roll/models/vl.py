"""Vision-language models through transformers: Qwen2-VL, Qwen2.5-VL and Qwen3-VL (dense), loaded from disk with
`AutoModelForImageTextToText`, and their processors (image processor + tokenizer + chat template).

What the engines need from a VL model, in one place:
- `vl_model_type(path)`: the family of an HF folder (None for a text model; an InputError for a VL family roll
  does not build, naming why);
- `load_processor(path)`: `AutoProcessor`, or — where transformers cannot build the family's video processor
  (it needs torchvision, which has no CPU build for this torch) — the same processor class without its video
  part (`image_only_processor`), so images work and videos are refused with that reason;
- `mm_token_types` / `rope_positions`: the M-RoPE position ids HF's own forward computes (text, temporal, height,
  width), built explicitly so that a packed row (sequence packing) gets them too;
- `vision_placeholder_ids`: the tokens a response must never hold (generation bans them: see docs/vision_language.md).
"""

import json
from pathlib import Path

import torch

from roll.utils.errors import InputError
from roll.utils.logging import get_logger

logger = get_logger("roll.models.vl")

# model_type → what the family is built from (the processor class and its video token)
VL_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
# VL families roll does not build, with the reason (an HF config of one of these is refused by name)
UNBUILT_VL_TYPES = {
    "qwen3_vl_moe": "Qwen3-VL MoE is not built here (the dense Qwen3-VL is); its experts need the MoE paths of "
    "the training engines verified with a vision tower first",
    "qwen2_5_omni": "Qwen2.5-Omni takes audio, which roll does not encode",
    "qwen3_omni_moe": "Qwen3-Omni takes audio, which roll does not encode",
}
VISION_TOWER = "model.visual"  # the vision tower's module name in every family here (freeze_module_prefix)
ULYSSES_VL_LIMIT = (
    "model_args.ulysses_size > 1 with a vision-language model is not built: the Ulysses forward splits input ids "
    "over ranks and passes no pixel values or M-RoPE ids (set ulysses_size: 1)"
)
TORCHVISION_REASON = (
    "transformers builds the Qwen-VL video processors (and AutoProcessor, which loads them) only with torchvision, "
    "and no CPU build of torchvision for torch 2.13 is installable here (the PyPI wheel links libtorch_cuda)"
)


def read_model_type(path) -> str | None:
    """config.json's model_type of an HF folder (None where there is no readable config)."""
    config = Path(path) / "config.json"
    try:
        return json.loads(config.read_text()).get("model_type")
    except (OSError, ValueError):
        return None


def vl_model_type(path) -> str | None:
    """The VL family of the HF folder at `path` (one of VL_MODEL_TYPES), None for a text model; a VL family roll
    does not build is an InputError naming it and why."""
    model_type = read_model_type(path)
    if model_type in UNBUILT_VL_TYPES:
        raise InputError(f"{path}: model_type {model_type!r} is not supported: {UNBUILT_VL_TYPES[model_type]}")
    return model_type if model_type in VL_MODEL_TYPES else None


def is_vl_config(config) -> bool:
    return getattr(config, "model_type", None) in VL_MODEL_TYPES


def load_vl_model(path, dtype: torch.dtype, **kwargs) -> torch.nn.Module:
    """The whole VL model (vision tower + language model + output layer) from an HF folder."""
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(path, dtype=dtype, **kwargs)


# --- processors ---------------------------------------------------------------------------------------------
def processor_class(model_type: str):
    from transformers import Qwen2_5_VLProcessor, Qwen2VLProcessor, Qwen3VLProcessor

    return {"qwen2_vl": Qwen2VLProcessor, "qwen2_5_vl": Qwen2_5_VLProcessor, "qwen3_vl": Qwen3VLProcessor}[model_type]


_IMAGE_ONLY: dict[type, type] = {}


def image_only_processor(family: type) -> type:
    """`family` (e.g. Qwen2VLProcessor) without its video processor: its sub-processors are the image processor
    and the tokenizer only. transformers 5.19 cannot construct a Qwen-VL processor without torchvision even when
    no video processor is given (its class check of the video attribute imports the torchvision-only base
    class); everything else — image token expansion, chat template, saving — is the family's own code. The class
    keeps the family's name, so a folder it saves loads with AutoProcessor where torchvision exists."""
    if family not in _IMAGE_ONLY:

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            family.__init__(self, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

        _IMAGE_ONLY[family] = type(family.__name__, (family,), {"__init__": __init__, "video_processor": None})
    return _IMAGE_ONLY[family]


def load_processor(path):
    """The processor of a VL folder: AutoProcessor where transformers can build it (torchvision installed and the
    folder has a video processor); otherwise the family's processor without video (image_only_processor) from the
    folder's image processor, tokenizer and chat template — videos are then refused (`video_refusal`)."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    model_type = vl_model_type(path)
    if model_type is None:
        raise InputError(f"{path}: not a vision-language model folder (model_type {read_model_type(path)!r})")
    if video_refusal(path) is None:
        return AutoProcessor.from_pretrained(path)
    image_processor = AutoImageProcessor.from_pretrained(path, backend="pil")
    tokenizer = AutoTokenizer.from_pretrained(path)
    template = Path(path) / "chat_template.jinja"
    chat_template = template.read_text() if template.is_file() else getattr(tokenizer, "chat_template", None)
    logger.info("%s: processor without video (%s)", path, video_refusal(path))
    return image_only_processor(processor_class(model_type))(image_processor, tokenizer, chat_template=chat_template)


def video_refusal(path) -> str | None:
    """Why videos cannot be encoded for the VL folder at `path` (None: they can)."""
    import importlib.util

    if importlib.util.find_spec("torchvision") is None:
        return TORCHVISION_REASON
    if not (Path(path) / "video_preprocessor_config.json").is_file():
        return f"{path} has no video processor (video_preprocessor_config.json)"
    return None


def supports_video(processor) -> bool:
    return getattr(processor, "video_processor", None) is not None


# --- ids and positions -----------------------------------------------------------------------------------------
def vision_placeholder_ids(config) -> list[int]:
    """The image and video placeholder token ids: the processor expands each into one token per merged patch, and
    the model replaces exactly those positions with vision features (their count must match the features)."""
    return [int(config.image_token_id), int(config.video_token_id)]


def mm_token_types(input_ids: torch.Tensor, config) -> torch.Tensor:
    """Per token: 0 text, 1 image placeholder, 2 video placeholder (the processor's `mm_token_type_ids`)."""
    types = torch.zeros_like(input_ids)
    types[input_ids == config.image_token_id] = 1
    types[input_ids == config.video_token_id] = 2
    return types


def inner_vl_model(model: torch.nn.Module) -> torch.nn.Module:
    """The family's XModel (holding get_rope_index) under engine and adapter wrappers: a DeepSpeed engine's
    `.module`, peft's base model, then the conditional-generation model's `.model`."""
    module = getattr(model, "module", model)
    if hasattr(module, "get_base_model"):
        module = module.get_base_model()
    inner = getattr(module, "model", None)
    if inner is None or not hasattr(inner, "get_rope_index"):
        raise TypeError(f"{type(module).__name__} is not a Qwen-VL conditional-generation model")
    return inner


def rope_positions(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, text_positions, image_grid_thw
) -> torch.Tensor:
    """(4, rows, T) position ids of a padded batch: the text positions (what packing and the mask read), then the
    family's own M-RoPE (temporal, height, width) from its get_rope_index — the ids HF's forward computes when
    given none. get_rope_index reads only the config, so this works on sharded models too."""
    inner = inner_vl_model(model)
    types = mm_token_types(input_ids, inner.config)
    mrope, _ = inner.get_rope_index(
        input_ids, mm_token_type_ids=types, image_grid_thw=image_grid_thw, attention_mask=attention_mask
    )
    return torch.cat([text_positions.unsqueeze(0).to(mrope.dtype), mrope], dim=0)
