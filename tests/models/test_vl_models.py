"""Vision-language models through transformers (roll/models/vl.py, roll/strategies/vl_forward.py): the tiny
Qwen2-VL / Qwen2.5-VL / Qwen3-VL folders load back with AutoModelForImageTextToText and their processors, the
forwards' explicit M-RoPE ids equal HF's own, packed equals padded, and hf_infer generates and scores with images
as HF does. Tolerances: float32; HF's own forward vs roll's batched forward ≤ 1e-5 (observed ≤ 5e-7)."""

import importlib.util

import pytest
import torch

from roll.distributed.data_proto import DataProto
from roll.models.vl import TORCHVISION_REASON, load_processor, load_vl_model, rope_positions, vl_model_type
from roll.utils.errors import InputError
from roll.utils.functional import rollout_tensors
from tests.models.vl_fixtures import hf_infer, hf_row_log_probs, prompt_rows, tiny_vl

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    directory = tmp_path_factory.mktemp("vl")
    return {family: tiny_vl(directory, family) for family in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_models_load_back_with_their_processor(models, family):
    path = models[family]
    model = load_vl_model(path, torch.float32)
    processor = load_processor(path)
    assert vl_model_type(path) == family
    assert model.config.model_type == family and type(model).__name__.endswith("ForConditionalGeneration")
    assert type(processor).__name__.replace("_", "").lower() == family.replace("_", "") + "processor"
    config = model.config.get_text_config()
    assert config.hidden_size == 64 and config.hidden_size // config.num_attention_heads >= 32
    assert len(processor.tokenizer) <= 1000 and config.vocab_size == len(processor.tokenizer)
    assert any(name.startswith("model.visual.") for name, _ in model.named_parameters())
    # the chat template puts one placeholder per image; the processor expands it to the image's merged patches
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "count the dots"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text.count("<|image_pad|>") == 1
    [row] = prompt_rows(processor, 1)
    grid = row["multi_modal_inputs"]["image_grid_thw"]
    assert row["prompt_ids"].count(model.config.image_token_id) == int(grid.prod()) // 4


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed here")
def test_without_torchvision_videos_are_refused_with_the_reason(models):
    from transformers import AutoProcessor

    with pytest.raises((ImportError, OSError)):  # what transformers itself does here
        AutoProcessor.from_pretrained(models["qwen2_vl"])
    processor = load_processor(models["qwen2_vl"])
    assert processor.video_processor is None
    assert "torchvision" in TORCHVISION_REASON


def test_unbuilt_vl_families_are_refused_by_name(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen3_vl_moe"}')
    with pytest.raises(InputError, match="qwen3_vl_moe.*not supported"):
        vl_model_type(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "qwen2"}')
    assert vl_model_type(tmp_path) is None


def padded_batch(processor, count: int, response_length: int = 5, seed: int = 0) -> DataProto:
    """`count` prompt rows with random responses (no special tokens), the layout of a rollout."""
    from roll.data.multimodal import collate_vl_prompts

    rows = prompt_rows(processor, count, seed=seed)
    batch = collate_vl_prompts(rows, 32, processor.tokenizer.pad_token_id)
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, response_length + 1, (count,), generator=generator)
    response_mask = (torch.arange(response_length) < lengths[:, None]).float()
    responses = torch.randint(10, 200, (count, response_length), generator=generator) * response_mask.long()
    tensors = rollout_tensors(
        batch.batch["prompts"], batch.batch["attention_mask"], responses, response_mask, torch.zeros(count, 5)
    )
    out = DataProto.from_dict(tensors=tensors, non_tensors=batch.non_tensor_batch, meta_info={"temperature": 1.0})
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_scoring_a_vl_batch_equals_hfs_own_forward(models, family):
    """hf_infer's batched, left-padded, column-cut forward with explicit M-RoPE ids vs HF computing its own ids on
    each unpadded row."""
    strategy = hf_infer(models[family])
    batch = padded_batch(load_processor(models[family]), 6)
    ours = strategy.compute_log_probs(batch)
    reference = hf_row_log_probs(
        strategy.model, batch.batch["input_ids"], batch.batch["attention_mask"], batch.non_tensor_batch[
            "multi_modal_inputs"], 5
    )  # fmt: skip
    assert (ours - reference * batch.batch["response_mask"]).abs().max() < 1e-5


def test_explicit_positions_equal_the_models_own(models):
    model = load_vl_model(models["qwen2_5_vl"], torch.float32).eval()
    batch = padded_batch(load_processor(models["qwen2_5_vl"]), 4)
    ids, mask = batch.batch["input_ids"], batch.batch["attention_mask"]
    rows = batch.non_tensor_batch["multi_modal_inputs"]
    vision = {key: torch.cat([row[key] for row in rows]) for key in ("pixel_values", "image_grid_thw")}
    positions = rope_positions(model, ids, mask, batch.batch["position_ids"], vision["image_grid_thw"])
    assert positions.shape == (4, *ids.shape)
    with torch.no_grad():
        own = model(input_ids=ids, attention_mask=mask, mm_token_type_ids=(ids == model.config.image_token_id).long(),
                    **vision).logits  # fmt: skip
        explicit = model(input_ids=ids, attention_mask=mask, position_ids=positions, **vision).logits
    assert torch.equal(own[mask.bool()], explicit[mask.bool()])


@pytest.mark.parametrize("family", ("qwen2_vl", "qwen3_vl"))
def test_a_packed_vl_row_equals_the_padded_batch(models, family):
    from roll.strategies.batching import hf_logits

    model = load_vl_model(models[family], torch.float32).eval()
    batch = padded_batch(load_processor(models[family]), 5)
    with torch.no_grad():
        padded = hf_logits(model, batch, torch.device("cpu"), packing=False)
        packed = hf_logits(model, batch, torch.device("cpu"), packing=True)
    real = batch.batch["attention_mask"].bool()
    assert (padded[real] - packed[real]).abs().max() < 1e-5


def test_a_response_holding_an_image_placeholder_is_refused(models):
    strategy = hf_infer(models["qwen2_vl"])
    batch = padded_batch(load_processor(models["qwen2_vl"]), 3)
    batch.batch["responses"][1, 0] = strategy.model.config.image_token_id
    batch.batch["input_ids"][:, 32:] = batch.batch["responses"]
    with pytest.raises(ValueError, match="row 1: the response holds an image/video placeholder"):
        strategy.compute_log_probs(batch)


def test_hf_infer_generates_with_images_as_hf_generate_does(models):
    """Greedy: every row token for token as HF's generate on that prompt alone; sampled (n=2 samples per prompt,
    adjacent rows sharing the prompt's pixel values): rollout log-probs = the scoring forward's, renormalised
    without the banned vision placeholders."""
    from roll.data.multimodal import collate_vl_prompts

    path = models["qwen2_vl"]
    processor = load_processor(path)
    rows = prompt_rows(processor, 4)
    batch = collate_vl_prompts(rows, 32, processor.tokenizer.pad_token_id)
    greedy = hf_infer(path, max_new_tokens=6, do_sample=False, num_return_sequences=1)
    out = greedy.generate(batch, {})
    model = greedy.model
    for index, row in enumerate(rows):
        ids = torch.tensor([row["prompt_ids"]])
        types = (ids == model.config.image_token_id).long()
        settings = dict(max_new_tokens=6, do_sample=False, num_beams=1, num_return_sequences=1)
        vision = dict(mm_token_type_ids=types, suppress_tokens=greedy.banned_token_ids, **row["multi_modal_inputs"])
        alone = model.generate(input_ids=ids, **settings, **vision)
        expected = alone[0, ids.shape[1] :].tolist()
        got = out.batch["responses"][index][out.batch["response_mask"][index].bool()].tolist()
        assert got == expected[: len(got)] and len(got) >= 1
    sampler = hf_infer(path, max_new_tokens=6, do_sample=True, temperature=1.0, num_return_sequences=2)
    batch.meta_info["seed"] = 3
    sampled = sampler.generate(batch, {})
    assert len(sampled) == 8 and sampled.non_tensor_batch["multi_modal_inputs"][3] is rows[1]["multi_modal_inputs"]
    scored = sampler.compute_log_probs(sampled)
    logits_mass = banned_mass(sampler, sampled)
    expected = (scored - torch.log1p(-logits_mass)) * sampled.batch["response_mask"]
    assert (expected - sampled.batch["rollout_log_probs"]).abs().max() < 1e-5
    banned = torch.tensor(sampler.banned_token_ids)
    assert not torch.isin(sampled.batch["responses"], banned).any()


def banned_mass(strategy, batch: DataProto) -> torch.Tensor:
    """Probability the model gives the banned placeholder tokens at each response position (B, R)."""
    from roll.strategies.batching import hf_logits
    from roll.utils.functional import slice_response_logits

    with torch.no_grad():
        logits = slice_response_logits(hf_logits(strategy.model, batch, torch.device("cpu"), False), 6)
    return logits.float().softmax(-1)[..., strategy.banned_token_ids].sum(-1)
