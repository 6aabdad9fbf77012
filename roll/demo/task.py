"""The demo's verifiable task: small word problems whose answer is a sum of two numbers.

"Tom has 3 apples and finds 4 more . How many apples now ?" → "\\boxed{7}". Operands are 1..4, so
there are 16 arithmetic facts (sums 2..8) behind ~1,550 problems (name × object × template × numbers).
Zero is left out on purpose: with a zero operand, repeating one number back would already be right.

The held-out split is by PHRASING: a phrasing is a (template, name, object) triple, and every problem
of a held-out phrasing (all 16 facts) is held out, so no held-out sentence frame — with any numbers —
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
MIN_OPERAND, MAX_OPERAND = 1, 4
# One-quantity sentences for the warm start: reading a count back, no arithmetic. They use the task's
# names and objects but none of its templates, and their numbers span every possible answer (0..8).
READING_TEMPLATES = [
    "{name} has {a} {obj} . How many {obj} does {name} have ?",
    "There are {a} {obj} . How many {obj} are there ?",
    "{name} sees {a} {obj} on the table . How many {obj} ?",
]
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
    operands = range(MIN_OPERAND, MAX_OPERAND + 1)
    for t, name, obj, a, b in itertools.product(range(len(TEMPLATES)), NAMES, OBJECTS, operands, operands):
        template = TEMPLATES[t]
        if "{name}" not in template and (name, obj) != (NAMES[0], OBJECTS[0]):
            continue  # templates without a name/object exist once per fact
        phrasing = f"{t}|{name}|{obj}" if "{name}" in template else str(t)
        problems.append(
            {
                "prompt": template.format(name=name, obj=obj, a=a, b=b),
                "ground_truth": str(a + b),
                "tag": TAG,
                "operands": [a, b],
                "phrasing": phrasing,
            }
        )
    return problems


def split_problems(
    seed: int = 0, heldout_phrasings: int = 12, balance_answers: bool = False
) -> tuple[list[dict], list[dict]]:
    """(train, heldout): `heldout_phrasings` random (template, name, object) phrasings with all their
    16 facts go to heldout (12 → 192 problems, each fact 12 times); both lists are shuffled.

    balance_answers: keep an equal number of training problems per answer (as many as the rarest
    answer has), so that no answer is more frequent than another in the training prompts. Sums of
    two numbers are otherwise triangular (5 is four times as common as 2 or 8), and RL on a tiny
    model then learns "answer a common number" before it learns to add.
    """
    problems = all_problems()
    rng = random.Random(seed)
    named = sorted({p["phrasing"] for p in problems if "|" in p["phrasing"]})
    held = set(rng.sample(named, heldout_phrasings))
    train = [p for p in problems if p["phrasing"] not in held]
    heldout = [p for p in problems if p["phrasing"] in held]
    if balance_answers:
        by_answer: dict[str, list[dict]] = {}
        for p in train:
            by_answer.setdefault(p["ground_truth"], []).append(p)
        per_answer = min(len(v) for v in by_answer.values())
        train = [p for answer in sorted(by_answer) for p in rng.sample(by_answer[answer], per_answer)]
    rng.shuffle(train)
    rng.shuffle(heldout)
    return train, heldout


def reading_problems() -> list[dict]:
    """Warm-start material: "Tom has 6 pens . How many pens does Tom have ?" → 6. Teaches the reply
    format and reading a number back; never two numbers, never a sum."""
    rows = []
    for template, name, obj, a in itertools.product(READING_TEMPLATES, NAMES, OBJECTS, range(2 * MAX_OPERAND + 1)):
        if "{name}" not in template and name != NAMES[0]:
            continue
        rows.append({"prompt": template.format(name=name, obj=obj, a=a), "ground_truth": str(a), "tag": TAG})
    return rows


def tokenizer_corpus() -> list[str]:
    """Texts the demo tokenizer is trained on: every prompt, warm-start prompt and possible reply."""
    return (
        [p["prompt"] for p in all_problems()]
        + [p["prompt"] for p in reading_problems()]
        + [answer_text(v) for v in answer_pool()]
    )


def write_jsonl(rows: list[dict], path: Path) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps({k: row[k] for k in COLUMNS}) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
