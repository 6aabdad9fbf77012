"""Tiny VL models, images and prompt rows shared by the VL tests (models/, data/, strategies/)."""

from dataclasses import dataclass

import numpy as np
import torch

WORDS = [f"w{i}" for i in range(40)] + ["how many red squares", "count the dots"]
# (height, width) → merged-patch grids of 1×1, 2×2, 2×3 and 1×3 (1, 4, 6 and 3 image tokens): variable-size rows
SIZES = ((28, 28), (56, 56), (56, 84), (28, 84))


def tiny_vl(directory, model_type: str = "qwen2_vl", seed: int = 0):
    from roll.demo.tiny_vl_model import build_tiny_vl_model

    return build_tiny_vl_model(str(directory / model_type), WORDS, model_type=model_type, seed=seed)


def image(height: int, width: int, seed: int):
    from PIL import Image

    return Image.fromarray((np.random.RandomState(seed).rand(height, width, 3) * 255).astype("uint8"))


def prompt_rows(processor, count: int, prompt_length: int = 32, dtype=torch.float32, seed: int = 0) -> list[dict]:
    """`count` encoded rows, one image each of the SIZES in turn, prompts of different lengths."""
    from roll.data.multimodal import encode_vl_row

    rows = []
    for index in range(count):
        height, width = SIZES[index % len(SIZES)]
        text = "how many red squares" + " w3" * (index % 3)
        picture = image(height, width, seed + index)
        rows.append(
            encode_vl_row(processor, text, [picture], prompt_length=prompt_length, dtype=dtype, where=f"row {index}")
        )
    return rows


@dataclass
class StandInWorker:  # test double for roll.distributed.worker.Worker: what strategies read
    worker_config: object
    rank: int = 0
    world_size: int = 1
    model_kind: str = "causal_lm"


def hf_infer(model_dir, **generating):
    """An initialised hf_infer strategy on `model_dir` (in this process)."""
    from roll.configs.worker import GeneratingArgs, ModelArgs, StrategyArgs, WorkerConfig
    from roll.strategies import create_strategy

    config = WorkerConfig(
        name="actor_infer",
        model_args=ModelArgs(model_name_or_path=str(model_dir)),
        strategy_args=StrategyArgs(strategy_name="hf_infer"),
        generating_args=GeneratingArgs(**generating),
        infer_batch_size=3,
    )
    strategy = create_strategy("hf_infer", StandInWorker(config))
    strategy.initialize()
    return strategy


def hf_row_log_probs(model, input_ids, attention_mask, mm_inputs, response_length: int) -> torch.Tensor:
    """Log-probs of each row's response under HF's own forward: one unpadded row at a time, the model computing its
    own M-RoPE ids from mm_token_type_ids (no position ids given); (rows, response_length), 0 after the response."""
    out = torch.zeros(input_ids.shape[0], response_length)
    for row in range(input_ids.shape[0]):
        keep = attention_mask[row].bool()
        ids = input_ids[row][keep][None]
        vision = mm_inputs[row]
        types = (ids == model.config.image_token_id).long()
        with torch.no_grad():
            logits = model(input_ids=ids, mm_token_type_ids=types, **vision).logits[0].float()
        length = int(keep[-response_length:].sum())
        if length:
            picked = logits[-length - 1 : -1].log_softmax(-1).gather(-1, ids[0, -length:, None])[:, 0]
            out[row, :length] = picked
    return out
