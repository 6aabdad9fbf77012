"""VL prompt encoding (roll/data/multimodal.py): ROLL's image columns (paths, bytes, `datasets` Image features), the
processor run once per row, `<image>` placeholders, rows too long after their image tokens named with their
length, videos refused with the reason, the collated batch and the vLLM request built from it."""

import io

import datasets
import pytest
import torch

from roll.data.multimodal import collate_vl_prompts, encode_vl_row, encode_vl_rows, load_image
from roll.models.vl import load_processor, video_refusal
from roll.utils.errors import InputError
from tests.models.vl_fixtures import image, tiny_vl


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_vl(tmp_path_factory.mktemp("vl"))


@pytest.fixture(scope="module")
def processor(model_dir):
    return load_processor(model_dir)


def png_bytes(picture) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def test_paths_bytes_and_datasets_images_encode_the_same(processor, tmp_path):
    picture = image(56, 84, seed=1)
    picture.save(tmp_path / "a.png")
    table = datasets.Dataset.from_dict(
        {"images": [[str(tmp_path / "a.png")]], "prompt": ["count the dots"]},
        features=datasets.Features({"images": datasets.Sequence(datasets.Image()), "prompt": datasets.Value("string")}),
    )
    table.to_parquet(str(tmp_path / "rows.parquet"))
    decoded = datasets.load_dataset("parquet", data_files=str(tmp_path / "rows.parquet"), split="train")[0]["images"][0]
    undecoded = {"bytes": png_bytes(picture), "path": None}
    forms = ["a.png", png_bytes(picture), decoded, undecoded, picture]
    encoded = [
        encode_vl_row(
            processor, "count the dots", [load_image(form, "row", str(tmp_path))], prompt_length=64,
            dtype=torch.float32, where="row",
        )
        for form in forms
    ]  # fmt: skip
    for other in encoded[1:]:
        assert other["prompt_ids"] == encoded[0]["prompt_ids"]
        pixels = other["multi_modal_inputs"]["pixel_values"]
        assert torch.equal(pixels, encoded[0]["multi_modal_inputs"]["pixel_values"])
    inputs = encoded[0]["multi_modal_inputs"]
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 6]]  # 56×84 pixels, 14-pixel patches
    assert inputs["pixel_values"].shape == (24, 3 * 2 * 14 * 14)
    assert encoded[0]["prompt_ids"].count(processor.image_token_id) == 6  # 2×2 patches merged into one token
    assert encoded[0]["multi_modal_data"]["image"][0].size == (84, 56)


def test_placeholders_dtype_and_errors_name_the_row(processor, tmp_path):
    pictures = [image(28, 28, seed=2), image(28, 56, seed=3)]
    row = encode_vl_row(processor, "w1 <image> w2 <image>", pictures, prompt_length=64, dtype=torch.bfloat16,
                        where="f row 0")  # fmt: skip
    assert row["multi_modal_inputs"]["pixel_values"].dtype == torch.bfloat16  # the model's dtype (ROLL's too)
    assert row["multi_modal_inputs"]["image_grid_thw"].dtype == torch.long
    text = row["prompt_text"]
    assert text.index("w1") < text.index("<|image_pad|>") < text.index("w2")
    with pytest.raises(InputError, match="f row 3: the prompt has 2 image placeholders but the row has 1 images"):
        encode_vl_row(processor, "<image><image>", pictures[:1], prompt_length=64, dtype=torch.float32,
                      where="f row 3")  # fmt: skip
    with pytest.raises(InputError, match=r"f row 1 image 0: image file '.*missing.png' does not exist"):
        load_image("missing.png", "f row 1 image 0", str(tmp_path))
    with pytest.raises(InputError, match="f row 2 image 0: the image could not be read"):
        load_image(b"not an image", "f row 2 image 0")


def test_rows_too_long_after_their_image_tokens_are_named(processor):
    table = [
        {"prompt": "count the dots", "images": [image(28, 28, seed=0)], "reward_model": {"ground_truth": 3}},
        {"prompt": "count the dots", "images": [image(56, 84, seed=0)], "reward_model": {"ground_truth": 4}},
        {"prompt": "count the dots", "images": [image(56, 56, seed=0)], "reward_model": {"ground_truth": 5}},
    ]
    short = len(encode_vl_row(processor, "count the dots", [image(28, 28, 0)], prompt_length=64,
                              dtype=torch.float32, where="x")["prompt_ids"])  # fmt: skip
    limit = short + 2  # the 1-token image fits; the 6- and 4-token ones do not
    truth = "reward_model.ground_truth"
    kwargs = dict(source="vl.parquet", prompt_length=limit, dtype=torch.float32, ground_truth_key=truth)
    named = rf"vl.parquet row 1 \({short + 5} tokens\), vl.parquet row 2 \({short + 3} tokens\)"
    with pytest.raises(InputError, match=rf"2 prompts are longer than prompt_length={limit} tokens with their image "
                       rf"tokens: {named}"):  # fmt: skip
        encode_vl_rows(table, processor, **kwargs)
    rows, dropped = encode_vl_rows(table, processor, on_long_prompt="drop", **kwargs)
    assert [row["where"] for row in rows] == ["vl.parquet row 0"] and rows[0]["ground_truth"] == "3"
    assert dropped == [("vl.parquet row 1", short + 5), ("vl.parquet row 2", short + 3)]


def test_videos_are_refused_with_the_reason(processor, model_dir):
    reason = video_refusal(model_dir)
    assert reason
    table = [{"prompt": "what happens", "video": "clip.mp4"}]
    with pytest.raises(InputError, match="vl.jsonl row 0: column 'video' holds a video, which is refused: .*"):
        encode_vl_rows(table, processor, source="vl.jsonl", prompt_length=64, dtype=torch.float32,
                       video_refusal=reason)  # fmt: skip


def test_collated_batch_and_its_vllm_requests(processor):
    from roll.strategies.vllm_infer import multimodal_request

    rows = [
        encode_vl_row(processor, "count the dots" + " w1" * i, [image(28 * (1 + i % 2), 56, i)], prompt_length=40,
                      dtype=torch.float32, where=f"row {i}")
        for i in range(3)
    ]  # fmt: skip
    batch = collate_vl_prompts(rows, 40, processor.tokenizer.pad_token_id)
    assert batch.batch["prompts"].shape == (3, 40) and len(batch.non_tensor_batch["multi_modal_inputs"]) == 3
    shard = batch.chunk(3)[1].compact()  # dispatch by data-parallel rank keeps each row's own pixel values
    assert shard.non_tensor_batch["multi_modal_inputs"][0] is rows[1]["multi_modal_inputs"]
    image_id = processor.image_token_id
    for row in rows:
        request = multimodal_request(row["prompt_ids"], row["multi_modal_data"], image_id)
        grid = row["multi_modal_inputs"]["image_grid_thw"][0]
        assert request["prompt_token_ids"].count(image_id) == 1  # vLLM expands it itself
        assert request["multi_modal_data"]["image"] == row["multi_modal_data"]["image"]
        # vLLM's expansion (one placeholder per merged patch) gives back the trainer's prompt ids
        at = request["prompt_token_ids"].index(image_id)
        expanded = request["prompt_token_ids"][:at] + [image_id] * (int(grid.prod()) // 4) + request[
            "prompt_token_ids"][at + 1 :]  # fmt: skip
        assert expanded == row["prompt_ids"]
    with pytest.raises(ValueError, match="a prompt has 1 image placeholders but its row carries 0 images"):
        multimodal_request(rows[0]["prompt_ids"], {}, image_id)
