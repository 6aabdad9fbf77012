"""The code-and-judge demo's tasks: tiny Python functions graded in the sandbox, and YES/NO verdicts.

Code task: "Write f ( x ) that returns x plus 3 ." → a fenced program
    ```python
    def f(x):
        return x + 3
    ```
graded by roll's code reward (CodeSandboxRewardWorker) with assert test cases run in the kernel sandbox.
Function names f/g/h, operations plus/times/minus, constants 1..5: 45 functions, each asked in several phrasings.
The held-out split is by phrasing (template), as in roll.demo.task: no held-out sentence frame occurs in training.

Judge task: the policy answers roll.demo.task's word problems ("\\boxed{7}") and a separate tiny judge model
reads roll's built-in judge prompt (question, reference answer, student answer) and replies YES or NO.
`judge_examples` builds its training conversations: the student answer equals the reference (YES), is another
number or is malformed (NO).
"""

import itertools
import json
import random

from roll.demo import task as math_task

CODE_TAG, JUDGE_TAG = "code", "math"  # the judge grades roll.demo.task's word problems (tagged math there)
NAMES = ["f", "g", "h"]
OPS = {"plus": "+", "times": "*", "minus": "-"}
CONSTANTS = range(1, 6)
TEST_INPUTS = (3, 7)  # x + k, x * k and x - k differ at both for every k in CONSTANTS, as do different k
TEMPLATES = [
    "Write {name} ( x ) that returns x {op} {k} .",
    "Define a function {name} giving x {op} {k} .",
    "Code {name} so that {name} ( x ) is x {op} {k} .",
    "Make {name} ( x ) return x {op} {k} .",
]
HELDOUT_TEMPLATES = (3,)
# The demo's judge_prompt: roll's built-in YES/NO question without the question line. Checking that two
# answers agree does not need the question, and it makes the tiny judge's input longer and its check slower to
# learn (measured with the question and a verdict-only reply: 74 % right after 1,500 warm-start steps).
JUDGE_PROMPT = (
    "Is the student answer equivalent to the reference answer? Reply YES or NO.\n"
    "Reference answer: {reference}\nStudent answer: {response}"
)


def program(name: str, op: str, k: int) -> str:
    return f"def {name}(x):\n    return x {OPS[op]} {k}\n"


def reply_text(code: str) -> str:
    """The reply format: one fenced Python block (the code reward runs its last fenced block)."""
    return f"```python\n{code}```"


def test_cases(name: str, op: str, k: int) -> str:
    """The row's ground truth: one assert case (one sandbox run per sample) checking two inputs."""
    expected = {x: eval(f"{x} {OPS[op]} {k}") for x in TEST_INPUTS}  # noqa: S307 - our own constant expression
    checks = "\n".join(f"assert {name}({x}) == {y}" for x, y in expected.items())
    return json.dumps({"case_type": "assert", "test_cases": [checks]})


def code_problems() -> list[dict]:
    rows = []
    for t, name, op, k in itertools.product(range(len(TEMPLATES)), NAMES, OPS, CONSTANTS):
        rows.append(
            {
                "prompt": TEMPLATES[t].format(name=name, op=op, k=k),
                "ground_truth": test_cases(name, op, k),
                "tag": CODE_TAG,
                "template": t,
                "function": (name, op, k),
            }
        )
    return rows


def split(seed: int = 0, math_heldout_phrasings: int = 12) -> tuple[list[dict], list[dict]]:
    """(train, heldout): code problems split by template, word problems by phrasing (roll.demo.task); shuffled."""
    code = code_problems()
    math_train, math_heldout = math_task.split_problems(seed, math_heldout_phrasings)
    train = [p for p in code if p["template"] not in HELDOUT_TEMPLATES] + math_train
    heldout = [p for p in code if p["template"] in HELDOUT_TEMPLATES] + math_heldout
    rng = random.Random(seed)
    rng.shuffle(train)
    rng.shuffle(heldout)
    return train, heldout


def code_warm_start(problems: list[dict], seed: int) -> list[list[dict]]:
    """Each code prompt answered with a well-formed function of the asked name and operation whose constant is
    drawn at random (right 1 time in 5): the reply format and part of the task, the rest left to RL."""
    rng = random.Random(seed)
    chats = []
    for p in problems:
        name, op, _ = p["function"]
        code = program(name, op, rng.choice(list(CONSTANTS)))
        chats.append([{"role": "user", "content": p["prompt"]}, {"role": "assistant", "content": reply_text(code)}])
    return chats


# ---- the judge's material ---------------------------------------------------------------------------------
MALFORMED = ["", "\\boxed{", "\\boxed{}", "{", "}", "\\boxed"]

JUDGE_REPLY_TOKENS = 5  # "7", " ", "5", " NO", EOS: the demo's judge_max_new_tokens


def verdict_table(truth: str) -> list[tuple[str, str]]:
    """Every (student answer, judge reply) taught for one reference. The reply names the number the student gave
    ("-" when the answer is malformed), then the reference, then the verdict: "7 5 NO", "5 5 YES", "- 5 NO".
    Writing the two numbers first puts them next to the verdict, which a 0.2M-parameter model learns to compare
    in ~1,000 steps; asked for YES/NO directly, it stayed at chance after 600 (lr 3e-3) and 1,000 (lr 1e-2).
    Each possible number boxed and bare, the reference with a part missing or doubled, and malformed replies;
    the right answers are repeated so that YES and NO are equally frequent."""
    boxed = math_task.answer_text
    numbers = math_task.answer_pool()

    def reply(read: str) -> str:
        return f"{read} {truth} {'YES' if read == truth else 'NO'}"

    table = [(boxed(n), reply(n)) for n in numbers] + [(n, reply(n)) for n in numbers]
    malformed = MALFORMED + [boxed(truth)[:-1], boxed(truth) + "}", boxed(truth) * 2]
    table += [(answer, reply("-")) for answer in malformed]
    yes = [row for row in table if row[1].endswith("YES")]
    return table + yes * ((len(table) - len(yes)) // len(yes) - 1)


def judge_examples(prompt_template: str, references: list[str], question: str = "") -> list[list[dict]]:
    """The judge's training conversations: `prompt_template` filled in with each reference and each student
    answer of its verdict_table (and `question`), answered YES or NO."""
    chats = []
    for truth in references:
        for answer, verdict in verdict_table(truth):
            user = prompt_template.format(question=question, reference=truth, response=answer)
            chats.append([{"role": "user", "content": user}, {"role": "assistant", "content": verdict}])
    return chats


def tokenizer_corpus(prompt_template: str = JUDGE_PROMPT) -> list[str]:
    """Every text the demo's models read or write, so that each word and code piece is one token."""
    code = code_problems()
    replies = [reply_text(program(*p["function"])) for p in code]
    judge_words = [prompt_template.format(question="", reference="", response=""), "- 5 YES", "- 5 NO"]
    return math_task.tokenizer_corpus() + [p["prompt"] for p in code] + replies + judge_words
