"""The VL demo's visual task: count the shapes in a small drawn image, answered as "\\boxed{N}".

Each image is a 56 × 56 white canvas cut into a 4 × 4 grid of 14-pixel cells (one vision patch each on the tiny
Qwen2-VL models, roll.demo.tiny_vl_model); 1–5 cells hold one shape (square, disc or triangle, 6–10 px, a random
colour and position inside the cell). With `distractors`, up to that many extra shapes of a second colour are
added and the question names the colour to count. Counts are uniform over 1–5, so no answer is more frequent.

The held-out split is by PHRASING, as in roll.demo.task: held-out rows are asked in phrasings that never occur in
training (and on images of their own), so held-out accuracy measures whether the model reads the image, not
whether it memorised a sentence. The reply is graded by the math rule reward (roll.workers.rewards.math_rule).

Rows carry roll's columns (`images`, `prompt`, `ground_truth`, `tag`) and ROLL's raw VL columns (`data_source`,
`reward_model.ground_truth`), so both loaders read the file with their defaults. `prompt` starts with ROLL's
`<image>` placeholder. Images are PNG bytes in a `datasets` Image list column of a parquet file.
"""

import io
import random
from pathlib import Path

CANVAS, CELL = 56, 14  # pixels; CANVAS // CELL cells per side
MIN_COUNT, MAX_COUNT = 1, 5
SHAPES = ("square", "disc", "triangle")
COLOURS = {"red": (220, 40, 40), "green": (30, 160, 60), "blue": (40, 70, 220), "black": (20, 20, 20)}
BACKGROUND = (255, 255, 255)
IMAGE_TOKEN = "<image>"  # ROLL's placeholder in a prompt string
TAG = "count"
# "{what}" is "shapes" or "<colour> shapes"; the last two phrasings are held out
TEMPLATES = (
    "How many {what} are in the picture ?",
    "Count the {what} in the image .",
    "How many {what} do you see ?",
    "What is the number of {what} ?",
    "Tell me how many {what} there are .",
    "How many {what} are shown ?",
)
HELDOUT_TEMPLATES = (4, 5)
COLUMNS = ("images", "prompt", "ground_truth", "tag", "data_source", "reward_model")


def answer_text(value) -> str:
    """The reply format the math rule reward grades."""
    return f"\\boxed{{{value}}}"


def answer_pool() -> list[str]:
    return [str(n) for n in range(MIN_COUNT, MAX_COUNT + 1)]


def question(template: int, colour: str | None = None) -> str:
    """A prompt's text without the image placeholder."""
    return TEMPLATES[template].format(what="shapes" if colour is None else f"{colour} shapes")


def random_layout(rng: random.Random, count: int, distractors: int = 0) -> dict:
    """Which cells hold which shape: `count` shapes of the counted colour and 0..distractors of another."""
    colours = rng.sample(sorted(COLOURS), 2)
    extra = rng.randint(0, distractors)
    cells = rng.sample(range((CANVAS // CELL) ** 2), count + extra)
    shapes = []
    for index, cell in enumerate(cells):
        size = rng.randint(6, 10)
        shapes.append(
            {
                "cell": cell,
                "shape": rng.choice(SHAPES),
                "colour": colours[0] if index < count else colours[1],
                "size": size,
                "dx": rng.randint(1, CELL - size - 1),  # ≥ 1 px from the cell's edges: shapes never touch
                "dy": rng.randint(1, CELL - size - 1),
            }
        )
    return {"count": count, "colour": colours[0], "shapes": shapes}


def draw(layout: dict):
    """The layout as an RGB PIL image."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (CANVAS, CANVAS), BACKGROUND)
    pen = ImageDraw.Draw(image)
    per_row = CANVAS // CELL
    for shape in layout["shapes"]:
        x = shape["cell"] % per_row * CELL + shape["dx"]
        y = shape["cell"] // per_row * CELL + shape["dy"]
        s, fill = shape["size"] - 1, COLOURS[shape["colour"]]
        if shape["shape"] == "square":
            pen.rectangle((x, y, x + s, y + s), fill=fill)
        elif shape["shape"] == "disc":
            pen.ellipse((x, y, x + s, y + s), fill=fill)
        else:
            pen.polygon([(x, y + s), (x + s, y + s), (x + s // 2, y)], fill=fill)
    return image


def png_bytes(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _layout_key(layout: dict) -> tuple:
    return tuple(sorted(tuple(sorted(s.items())) for s in layout["shapes"]))


def make_rows(
    seed: int = 0, train_images: int = 1000, heldout_images: int = 100, distractors: int = 0
) -> tuple[list[dict], list[dict]]:
    """(train, heldout) rows: every image is asked once, in a training phrasing or a held-out one; no image
    occurs twice. Deterministic for the same arguments. distractors > 0: the question names the colour."""
    rng = random.Random(seed)
    seen: set = set()
    train_templates = [t for t in range(len(TEMPLATES)) if t not in HELDOUT_TEMPLATES]
    splits = []
    for images, templates in ((train_images, train_templates), (heldout_images, list(HELDOUT_TEMPLATES))):
        rows = []
        while len(rows) < images:
            layout = random_layout(rng, rng.randint(MIN_COUNT, MAX_COUNT), distractors)
            if _layout_key(layout) in seen:
                continue
            seen.add(_layout_key(layout))
            template = rng.choice(templates)
            text = question(template, layout["colour"] if distractors else None)
            rows.append(
                {
                    "images": [png_bytes(draw(layout))],
                    "prompt": IMAGE_TOKEN + text,
                    "ground_truth": str(layout["count"]),
                    "tag": TAG,
                    "data_source": TAG,
                    "reward_model": {"ground_truth": str(layout["count"])},
                    "template": template,
                    "layout": layout,
                }
            )
        splits.append(rows)
    return splits[0], splits[1]


def warm_start_rows(rows: list[dict], seed: int = 0) -> list[dict]:
    """SFT rows teaching the reply FORMAT only: each row's image and prompt answered with a uniformly random
    count (right one time in five), as the text demo's warm start (roll.demo.warm_start) does."""
    rng = random.Random(seed)
    pool = answer_pool()
    return [
        {"images": row["images"], "prompt": row["prompt"], "response": answer_text(rng.choice(pool))} for row in rows
    ]


def tokenizer_corpus() -> list[str]:
    """Every prompt text (all phrasings, with and without each colour) and every reply, for the tiny tokenizer."""
    texts = [question(t, c) for t in range(len(TEMPLATES)) for c in (None, *sorted(COLOURS))]
    return texts + [answer_text(v) for v in answer_pool()]


def write_parquet(rows: list[dict], path: Path, columns: tuple[str, ...] = COLUMNS) -> Path:
    """The rows' `columns` as a parquet file `datasets` reads back with the images as an Image list column."""
    import datasets

    features = {
        "images": datasets.Sequence(datasets.Image()),
        "prompt": datasets.Value("string"),
        "ground_truth": datasets.Value("string"),
        "tag": datasets.Value("string"),
        "data_source": datasets.Value("string"),
        "reward_model": {"ground_truth": datasets.Value("string")},
        "response": datasets.Value("string"),
    }
    table = {
        column: [
            [{"bytes": b, "path": None} for b in row[column]] if column == "images" else row[column] for row in rows
        ]
        for column in columns
    }
    dataset = datasets.Dataset.from_dict(table, features=datasets.Features({c: features[c] for c in columns}))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    dataset.to_parquet(str(path))
    return Path(path)


def write_task(output_dir: str, seed: int = 0, train_images: int = 1000, heldout_images: int = 100) -> dict:
    """train.parquet, heldout.parquet and warm_start.parquet (images, prompt, response) under output_dir."""
    out = Path(output_dir)
    train, heldout = make_rows(seed, train_images, heldout_images)
    return {
        "train": write_parquet(train, out / "train.parquet"),
        "heldout": write_parquet(heldout, out / "heldout.parquet"),
        "warm_start": write_parquet(
            warm_start_rows(train, seed), out / "warm_start.parquet", ("images", "prompt", "response")
        ),
    }
