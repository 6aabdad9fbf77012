"""No run trains on garbage (issue 42): ground truths a domain grades against that are missing, NaN (a bare JSON
NaN) or empty, and a data file with fewer prompts than one step draws, are refused — by `--dry_run` on the files
as they are and at start-up on the loaded rows (before Ray) — with the file, the column and the count;
`allow_repeated_prompts_in_step: true` turns the second into a warning. During a run, a domain whose every
sample scores the same for N steps in a row gets a warning naming it and what it means."""

import json
import logging

import pytest

from roll.data.checks import MISSING, NAN, check_ground_truths, check_prompts_per_step, truth_defect
from roll.data.prompts import MixedPromptSampler, PromptSampler
from roll.pipeline.core.score_watch import ConstantScoreWarning
from roll.utils.errors import InputError
from tests.pipeline.helpers import make_config
from tests.reliability.test_launcher import launcher, no_ray, rlvr_args  # noqa: F401 (no_ray: a fixture)


class ReachedRay(Exception):
    pass


def write_rows(path, truths, lines=None):
    """A JSONL file of the demo's kind of prompt, one row per ground truth (`...` leaves the column out); a truth
    given as a str is written as it is (e.g. NaN, bare)."""
    rows = []
    for i, truth in enumerate(truths):
        row = json.dumps({"prompt": f"What is {i}+1?", "tag": "math"})
        if truth is not ...:
            value = truth if truth == "NaN" else json.dumps(truth)
            row = row[:-1] + f', "ground_truth": {value}}}'
        rows.append(row)
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def files(tmp_path):
    return {
        "nan": write_rows(tmp_path / "nan.jsonl", ["NaN"] * 8),
        "empty": write_rows(tmp_path / "empty.jsonl", [""] * 8),
        "mixed": write_rows(tmp_path / "mixed.jsonl", ["5", "NaN", "", ..., "6", "  ", "7", "8"]),
        "one_row": write_rows(tmp_path / "one_row.jsonl", ["1"]),
    }


CASES = {  # file, overrides → what the one message must say
    "nan": (
        "nan",
        [],
        "nan.jsonl: column 'ground_truth' has no usable value in 8 of 8 rows of domain 'math' (8 NaN; rows 0, 1, "
        "2, 3, 4, …), whose reward grades against it (MathRuleRewardWorker). Each such sample would score 0",
    ),
    "empty": ("empty", [], "empty.jsonl: column 'ground_truth' has no usable value in 8 of 8 rows of domain 'math'"),
    "mixed": ("mixed", [], "has no usable value in 4 of 8 rows of domain 'math' ("),
    "one_row": (
        "one_row",
        ["rollout_batch_size=64", "actor_train.training_args.per_device_train_batch_size=64"],
        "one_row.jsonl has 1 prompt and each step draws 64 (rollout_batch_size=64), so every step would train on "
        "the same prompts up to 64 times. Add prompts, lower rollout_batch_size to at most the prompts there are, "
        "or set allow_repeated_prompts_in_step: true",
    ),
}


def test_what_counts_as_no_ground_truth():
    assert [truth_defect(v) for v in (None, float("nan"), "", " \n", "0", "5", 0.0)] == [
        MISSING,
        NAN,
        "empty",
        "empty",
        None,
        None,
        None,
    ]


@pytest.mark.parametrize("case", CASES)
def test_dry_run_refuses_garbage_data_in_one_line(case, files, small_demo, tmp_path, capsys, no_ray):  # noqa: F811
    name, overrides, expected = CASES[case]
    args = rlvr_args(small_demo, tmp_path, f"actor_train.data_args.file_name={files[name]}", *overrides)
    assert launcher("start_rlvr_pipeline").main(["--dry_run", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: actor_train.data_args") and expected in err[-1], err[-1]
    assert "Traceback" not in "\n".join(err)


@pytest.mark.parametrize("case", CASES)
def test_start_up_refuses_garbage_data_before_ray(case, files, small_demo, tmp_path, monkeypatch):
    from roll.pipeline import base
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    name, overrides, expected = CASES[case]
    monkeypatch.setattr(base, "init_ray", lambda *a, **k: (_ for _ in ()).throw(ReachedRay()))
    config = make_config(small_demo, tmp_path / "out", [f"actor_train.data_args.file_name={files[name]}", *overrides])
    with pytest.raises(InputError) as caught:
        RLVRPipeline(config)
    assert expected in str(caught.value)
    if case == "mixed":  # counts by kind, and the rows; `datasets` reads a NaN among strings as null
        assert f"(2 {MISSING}, 2 empty; rows 1, 2, 3, 5)" in str(caught.value), caught.value


def test_validation_ground_truths_are_checked_too(files, small_demo, tmp_path, capsys, no_ray):  # noqa: F811
    args = rlvr_args(small_demo, tmp_path, f"validation.data_args.file_name={files['nan']}")
    assert launcher("start_rlvr_pipeline").main(["--dry_run", *args]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: validation.data_args: ")


def test_repeated_prompts_can_be_allowed_with_a_warning(files, small_demo, tmp_path, monkeypatch, roll_log, no_ray):  # noqa: F811
    from roll.pipeline import base
    from roll.pipeline.rlvr.pipeline import RLVRPipeline

    overrides = [*CASES["one_row"][1], "allow_repeated_prompts_in_step=true"]
    args = rlvr_args(small_demo, tmp_path, f"actor_train.data_args.file_name={files['one_row']}", *overrides)
    assert launcher("start_rlvr_pipeline").main(["--dry_run", *args]) == 0
    monkeypatch.setattr(base, "init_ray", lambda *a, **k: (_ for _ in ()).throw(ReachedRay()))
    config = make_config(
        small_demo, tmp_path / "out2", [f"actor_train.data_args.file_name={files['one_row']}", *overrides]
    )
    handler = logging.StreamHandler(roll_log)
    logging.getLogger("roll.data").addHandler(handler)
    try:
        with pytest.raises(ReachedRay):  # every start-up check passed
            RLVRPipeline(config)
    finally:
        logging.getLogger("roll.data").removeHandler(handler)
    assert (
        "one_row.jsonl has 1 prompt and each step draws 64 (rollout_batch_size=64): each step trains on the same "
        "prompts up to 64 times (allow_repeated_prompts_in_step: true)" in roll_log.getvalue()
    )


def test_each_domain_quota_needs_its_prompts():
    rows = [{"domain": "math"}] * 10 + [{"domain": "code"}] * 2
    pools = {name: [r for r in rows if r["domain"] == name] for name in ("math", "code")}
    sampler = MixedPromptSampler(pools, {"math": 0.5, "code": 0.5}, 0, "quota", {"math": "m", "code": "domain 'code'"})
    assert sampler.shortfalls(8) == [("domain 'code'", 2, 4)]  # 4 each; math has 10, code 2
    assert sampler.shortfalls(4) == []
    assert PromptSampler(rows, 0, "f.jsonl").shortfalls(13) == [("f.jsonl", 12, 13)]
    with pytest.raises(InputError, match=r"domain 'code' has 2 prompts and each step draws 4 .* up to 2 times"):
        check_prompts_per_step(sampler.shortfalls(8), 8, False, "actor_train.data_args.file_name")


def test_a_domain_that_grades_without_ground_truth_may_have_none():
    rows = [{"source": 0, "index": i, "domain": "judge", "truth_defect": MISSING} for i in range(3)]
    check_ground_truths(rows, ["f.jsonl"], {"judge": []}, "ground_truth", "actor_train.data_args")  # no error
    with pytest.raises(InputError, match="in 3 of 3 rows of domain 'judge'"):
        check_ground_truths(rows, ["f.jsonl"], {"judge": ["Grader"]}, "ground_truth", "actor_train.data_args")


def test_a_domain_scoring_the_same_for_n_steps_gets_one_warning(roll_log):
    watch = ConstantScoreWarning(steps=3)

    def step(index, **domains):
        metrics = {}
        for domain, (low, high) in domains.items():
            metrics.update({f"reward/{domain}/score/min": low, f"reward/{domain}/score/max": high})
        watch.on_step_end(index, None, metrics)

    logging.getLogger("roll.pipeline").setLevel(logging.INFO)
    step(0, math=(0.0, 0.0), code=(0.0, 1.0))
    step(1, math=(0.0, 0.0), code=(1.0, 1.0))
    assert roll_log.getvalue() == ""  # two steps: not yet
    step(2, math=(0.0, 0.0), code=(1.0, 1.0))
    step(3, math=(0.0, 0.0), code=(1.0, 1.0))  # math: warned once per streak; code: 3 of 3 at step 4
    log = roll_log.getvalue()
    assert log.count("reward domain 'math': every sample scored 0 for 3 steps in a row (steps 1-3)") == 1, log
    assert "the reward never gives credit. Check that the ground truths are the right answers" in log
    assert "reward domain 'code': every sample scored 1 for 3 steps in a row (steps 2-4)" in log
    assert "every answer is already right" in log
    step(4, math=(0.0, 0.5))  # the streak breaks; a new one of 0.5s warns again after 3 more steps
    for index in (5, 6, 7):
        step(index, math=(0.5, 0.5))
    assert "reward domain 'math': every sample scored 0.5 for 3 steps in a row (steps 6-8)" in roll_log.getvalue()
    assert "gives every answer the same score" in roll_log.getvalue()
