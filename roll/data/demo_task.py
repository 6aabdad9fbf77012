"""The demo's verifiable task: small word problems whose answer is a sum of two numbers.

"Tom has 3 apples and finds 4 more . How many apples now ?" → "\\boxed{7}". Operands are 0..4, so
there are 25 arithmetic facts behind ~2,400 phrasings (name × object × template × numbers).

The held-out split is by PHRASING: a phrasing is a (template, name, object) triple, and every problem
of a held-out phrasing (all 25 facts) is held out, so no held-out sentence frame — with any numbers —
occurs in training. The facts are shared, so held-out accuracy measures whether the model learned to
read the two numbers and add them, not whether it generalises arithmetic to new numbers.
"""
import itertools
import json
import random
from pathlib import Path

NAMES = ["Tom", "Ann", "Bob", "Eve", "Max", "Sue", "Leo", "Ivy"]
OBJECTS = ["apples", "pens", "cards", "coins", "books", "stones"]
TEMPLATES = [
    "{name} has {a} {obj} and finds {b} more . How many {obj} now ?",
    "{name} buys {a} {obj} then {b} {obj} . How many {obj} in total ?",
    "What is {a} plus {b} ?",
]
MAX_OPERAND = 4
TAG = "math"
COLUMNS = ("prompt", "ground_truth", "tag")


def answer_text(value) -> str:
    """The reply format the grader expects (math-verify reads the boxed number)."""
    return f"\\boxed{{{value}}}"


def answer_pool() -> list[str]:
    """Every possible answer, as ground-truth strings ("0" .. "8")."""
    return [str(n) for n in range(2 * MAX_OPERAND + 1)]


def all_problems() -> list[dict]:
    problems = []
    for t, name, obj, a, b in itertools.product(range(len(TEMPLATES)), NAMES, OBJECTS, range(MAX_OPERAND + 1),
                                                range(MAX_OPERAND + 1)):
        template = TEMPLATES[t]
        if "{name}" not in template and (name, obj) != (NAMES[0], OBJECTS[0]):
            continue  # templates without a name/object exist once per fact
        phrasing = f"{t}|{name}|{obj}" if "{name}" in template else str(t)
        problems.append({"prompt": template.format(name=name, obj=obj, a=a, b=b), "ground_truth": str(a + b),
                         "tag": TAG, "operands": [a, b], "phrasing": phrasing})
    return problems


def split_problems(seed: int = 0, heldout_phrasings: int = 8) -> tuple[list[dict], list[dict]]:
    """(train, heldout): `heldout_phrasings` random (template, name, object) phrasings with all their
    25 facts go to heldout (8 → 200 problems, each fact 8 times); both lists are shuffled."""
    problems = all_problems()
    rng = random.Random(seed)
    named = sorted({p["phrasing"] for p in problems if "|" in p["phrasing"]})
    held = set(rng.sample(named, heldout_phrasings))
    train = [p for p in problems if p["phrasing"] not in held]
    heldout = [p for p in problems if p["phrasing"] in held]
    rng.shuffle(train)
    rng.shuffle(heldout)
    return train, heldout


def tokenizer_corpus() -> list[str]:
    """Texts the demo tokenizer is trained on: every prompt and every possible reply."""
    return [p["prompt"] for p in all_problems()] + [answer_text(v) for v in answer_pool()]


def write_jsonl(rows: list[dict], path: Path) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps({k: row[k] for k in COLUMNS}) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
