"""The VL demo's counting task: deterministic for a seed, held-out phrasings never trained, ground truths that
match the drawn pixels, files `datasets` reads back, and a warm start that teaches the format only."""

import io
import re

import datasets
import numpy as np
import pytest
from PIL import Image

from roll.demo import vl_task
from roll.workers.rewards.math_rule import grade_final_answer


def image_of(row):
    return Image.open(io.BytesIO(row["images"][0]))


def shapes_drawn(image, colour=None) -> int:
    """Connected blobs of non-background pixels (of one colour): the shapes a reader would count."""
    pixels = np.asarray(image).astype(int)
    ink = np.any(pixels != vl_task.BACKGROUND, axis=-1)
    if colour is not None:
        ink &= np.all(np.abs(pixels - vl_task.COLOURS[colour]) < 2, axis=-1)
    return blobs(ink)


def blobs(mask: np.ndarray) -> int:
    """Connected components of a boolean mask, 8-connected (a flood fill: scipy is not a dependency)."""
    seen, count = np.zeros_like(mask, dtype=bool), 0
    for start in zip(*np.nonzero(mask)):
        if seen[start]:
            continue
        count += 1
        seen[start], stack = True, [start]
        while stack:
            y, x = stack.pop()
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    ny, nx = y + dy, x + dx
                    if 0 <= ny < mask.shape[0] and 0 <= nx < mask.shape[1] and mask[ny, nx] and not seen[ny, nx]:
                        seen[ny, nx] = True
                        stack.append((ny, nx))
    return count


def test_rows_are_deterministic_for_a_seed():
    first, again, other = vl_task.make_rows(3, 20, 5), vl_task.make_rows(3, 20, 5), vl_task.make_rows(4, 20, 5)
    assert first == again
    assert [r["images"] for r in first[0]] != [r["images"] for r in other[0]]


def test_heldout_phrasings_and_images_are_never_trained():
    train, heldout = vl_task.make_rows(0, 300, 60)
    assert {r["template"] for r in train}.isdisjoint(vl_task.HELDOUT_TEMPLATES)
    assert {r["template"] for r in heldout} == set(vl_task.HELDOUT_TEMPLATES)
    held_texts = {vl_task.question(t) for t in vl_task.HELDOUT_TEMPLATES}
    assert not any(r["prompt"].removeprefix(vl_task.IMAGE_TOKEN) in held_texts for r in train)
    images = [r["images"][0] for r in train + heldout]
    assert len(set(images)) == len(images)


@pytest.mark.parametrize("distractors", [0, 2])
def test_ground_truth_matches_the_pixels(distractors):
    train, heldout = vl_task.make_rows(1, 100, 20, distractors=distractors)
    for row in train + heldout:
        image = image_of(row)
        assert image.size == (vl_task.CANVAS, vl_task.CANVAS) and image.mode == "RGB"
        colour = row["layout"]["colour"] if distractors else None
        assert shapes_drawn(image, colour) == int(row["ground_truth"]), row["prompt"]
        assert (colour in row["prompt"]) if distractors else ("shapes" in row["prompt"])
    extra = sum(len(r["layout"]["shapes"]) - r["layout"]["count"] for r in train)
    assert (extra > 0) == (distractors > 0)


def test_counts_are_uniform_and_graded_by_the_math_rule():
    train, _ = vl_task.make_rows(0, 500, 0)
    counts = np.bincount([int(r["ground_truth"]) for r in train], minlength=6)[1:]
    assert counts.min() >= 70 and counts.sum() == 500  # ~100 each
    row = train[0]
    assert grade_final_answer(vl_task.answer_text(row["ground_truth"]), row["ground_truth"]) == 1.0
    wrong = str(int(row["ground_truth"]) % 5 + 1)
    assert grade_final_answer(vl_task.answer_text(wrong), row["ground_truth"]) == 0.0


def test_tokenizer_corpus_covers_every_prompt():
    corpus = set(vl_task.tokenizer_corpus())
    train, heldout = vl_task.make_rows(0, 50, 10, distractors=1)
    assert all(r["prompt"].removeprefix(vl_task.IMAGE_TOKEN) in corpus for r in train + heldout)
    assert all(vl_task.answer_text(v) in corpus for v in vl_task.answer_pool())


def test_files_read_back_with_datasets(tmp_path):
    paths = vl_task.write_task(str(tmp_path), seed=0, train_images=40, heldout_images=10)
    train = datasets.load_dataset("parquet", data_files=str(paths["train"]), split="train")
    assert len(train) == 40 and set(train.column_names) == set(vl_task.COLUMNS)
    assert isinstance(train.features["images"].feature, datasets.Image)
    rows, _ = vl_task.make_rows(0, 40, 10)
    for read, made in zip(train, rows):
        assert len(read["images"]) == 1 and read["images"][0].size == (vl_task.CANVAS, vl_task.CANVAS)
        assert np.array_equal(np.asarray(read["images"][0].convert("RGB")), np.asarray(image_of(made)))
        assert read["prompt"] == made["prompt"] and read["ground_truth"] == made["ground_truth"]
        assert read["reward_model"] == {"ground_truth": made["ground_truth"]} and read["tag"] == read["data_source"]
    heldout = datasets.load_dataset("parquet", data_files=str(paths["heldout"]), split="train")
    assert len(heldout) == 10 and set(heldout["prompt"]).isdisjoint(train["prompt"])


def test_warm_start_teaches_the_format_not_the_count(tmp_path):
    train, _ = vl_task.make_rows(0, 400, 0)
    warm = vl_task.warm_start_rows(train, seed=0)
    assert all(re.fullmatch(r"\\boxed\{[1-5]\}", w["response"]) for w in warm)
    assert [w["images"] for w in warm] == [r["images"] for r in train]
    right = np.mean([grade_final_answer(w["response"], r["ground_truth"]) for w, r in zip(warm, train)])
    assert 0.12 < right < 0.28  # chance is 1 in 5
    path = vl_task.write_parquet(warm[:8], tmp_path / "warm.parquet", ("images", "prompt", "response"))
    read = datasets.load_dataset("parquet", data_files=str(path), split="train")
    assert read.column_names == ["images", "prompt", "response"] and read["response"] == [
        w["response"] for w in warm[:8]
    ]
