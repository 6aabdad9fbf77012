"""The code-and-judge demo's tasks: test cases that tell every other function apart (judged in the sandbox), a
phrasing split, the judge's YES/NO table and the shipped config agreeing with the judge's training format."""

import itertools
import json

from omegaconf import OmegaConf

from roll.demo import code_task
from roll.demo import task as math_task
from roll.sandbox import run_python
from roll.workers.rewards.code_sandbox import case_program, extract_program, judge, parse_cases
from roll.workers.rewards.llm_judge import parse_verdict
from tests.pipeline.helpers import TINY_RLVR


def _passes_in_sandbox(reply: str, row: dict) -> bool:
    case_type, cases = parse_cases(row["ground_truth"], "test")
    code, stdin, expected = case_program(extract_program(reply), case_type, cases[0])
    result = run_python(code, timeout=5, memory_mb=256, stdin=stdin)
    return judge(result.returncode, result.timed_out, result.stdout, result.stderr, expected).passed


def test_each_row_accepts_its_program_and_no_other_function():
    """A reply scores 1 only with the asked operation AND constant (and name): every other function of the task
    family fails the row's asserts. Checked by evaluating the asserts on our own expressions here; two rows
    are run for real in the sandbox below."""
    functions = list(itertools.product(code_task.NAMES, code_task.OPS, code_task.CONSTANTS))
    for name, op, k in functions:
        (checks,) = json.loads(code_task.test_cases(name, op, k))["test_cases"]
        for other in functions:
            scope: dict = {}
            exec(code_task.program(*other), scope)  # noqa: S102 - the task's own programs, not a model's
            try:
                exec(checks, scope)  # noqa: S102
                passed = True
            except (AssertionError, NameError):
                passed = False
            assert passed == (other == (name, op, k)), (name, op, k, other)


def test_reference_and_wrong_programs_in_the_sandbox():
    row = next(p for p in code_task.code_problems() if p["function"] == ("g", "times", 3))
    assert _passes_in_sandbox(code_task.reply_text(code_task.program("g", "times", 3)), row)
    assert not _passes_in_sandbox(code_task.reply_text(code_task.program("g", "plus", 3)), row)
    assert not _passes_in_sandbox(code_task.reply_text(code_task.program("f", "times", 3)), row)


def test_heldout_templates_never_occur_in_training():
    train, heldout = code_task.split(seed=0)
    code_train = [r for r in train if r["tag"] == code_task.CODE_TAG]
    code_heldout = [r for r in heldout if r["tag"] == code_task.CODE_TAG]
    assert len(code_train) == 3 * 45 and len(code_heldout) == 45
    assert {r["template"] for r in code_heldout} == set(code_task.HELDOUT_TEMPLATES)
    assert not {r["template"] for r in code_train} & set(code_task.HELDOUT_TEMPLATES)
    assert {r["function"] for r in code_train} == {r["function"] for r in code_heldout}  # same 45 functions
    assert {r["tag"] for r in train} == {code_task.CODE_TAG, code_task.JUDGE_TAG}


def test_code_warm_start_names_the_function_and_operation_but_draws_the_constant():
    problems = [p for p in code_task.split(0)[0] if p["tag"] == code_task.CODE_TAG]
    chats = code_task.code_warm_start(problems, seed=0)
    right = 0
    for problem, chat in zip(problems, chats):
        name, op, _ = problem["function"]
        program = extract_program(chat[1]["content"])
        assert program.startswith(f"def {name}(x):\n    return x {code_task.OPS[op]} ")
        right += program == code_task.program(*problem["function"])
    assert right < len(problems) / 3  # near chance (1 in 5), far from the task


def test_judge_table_is_balanced_and_read_by_the_judge_reward():
    for truth in math_task.answer_pool():
        table = code_task.verdict_table(truth)
        verdicts = [parse_verdict(reply, "yes_no", 1.0) for _, reply in table]
        assert None not in verdicts
        assert abs(verdicts.count(1.0) - verdicts.count(0.0)) <= len(table) // 10
        for answer, reply in table:  # YES exactly for the reference, boxed or bare
            assert (parse_verdict(reply, "yes_no", 1.0) == 1.0) == (answer in (truth, math_task.answer_text(truth)))


def test_shipped_config_uses_the_judges_prompt_and_reply_length():
    config = OmegaConf.load(TINY_RLVR / "rlvr_tiny_code_judge.yaml")
    judge = config.rewards.judge
    assert judge.judge_prompt == code_task.JUDGE_PROMPT
    assert judge.judge_max_new_tokens == code_task.JUDGE_REPLY_TOKENS
    assert list(judge.tag_included) == [code_task.JUDGE_TAG] and list(config.rewards.code.tag_included) == ["code"]
