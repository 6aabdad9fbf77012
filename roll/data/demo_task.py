"""The demo's verifiable task: small word problems whose answer is a sum of two numbers.

"Tom has 3 apples and finds 4 more . How many apples now ?" → "\\boxed{ 7 }". Operands are 0..4, so
there are 25 arithmetic facts behind hundreds of phrasings (name × object × template). The held-out
split holds phrasings that never occur in training; the facts are shared, so held-out accuracy
measures whether the model learned the task, not whether it generalises arithmetic to new numbers.
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


def vocabulary() -> list[str]:
    words = set(NAMES + OBJECTS + [str(n) for n in range(2 * MAX_OPERAND + 1)] + ["\\boxed{", "}"])
    for template in TEMPLATES:
        words.update(w for w in template.split() if not w.startswith("{"))
    return sorted(words)


def all_problems() -> list[dict]:
    problems = []
    for template, name, obj, a, b in itertools.product(TEMPLATES, NAMES, OBJECTS, range(MAX_OPERAND + 1),
                                                       range(MAX_OPERAND + 1)):
        if "{name}" not in template and (name, obj) != (NAMES[0], OBJECTS[0]):
            continue  # templates without a name/object exist once per fact
        prompt = template.format(name=name, obj=obj, a=a, b=b)
        problems.append({"prompt": prompt, "ground_truth": str(a + b), "tag": TAG, "operands": [a, b]})
    return problems


def split_problems(seed: int = 0, heldout_size: int = 200) -> tuple[list[dict], list[dict]]:
    problems = all_problems()
    random.Random(seed).shuffle(problems)
    return problems[heldout_size:], problems[:heldout_size]


def write_jsonl(rows: list[dict], path: Path) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps({k: row[k] for k in ("prompt", "ground_truth", "tag")}) + "\n")


def answer_text(value) -> str:
    return f"\\boxed{{ {value} }}"
