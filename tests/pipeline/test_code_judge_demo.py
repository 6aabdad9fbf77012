"""The code-and-judge demo scores for real: one step of the shipped config (examples/tiny_rlvr/
rlvr_tiny_code_judge.yaml) on the shipped preparation, through Ray, the kernel sandbox and the judge model's own
hf_infer role. Both domains must give rewards that are neither all 0 nor constant, and each must be the grader's
own decision on the logged replies: the code scores are the sandbox verdicts on the programs (a reply without
a program never scores), the judge's agree with math-verify on the word problems' answers. Measured: ~1 min
with the preparation in the build cache (tests/build_cache.py), ~3 min more when it has to be built."""

import pytest

from roll.pipeline.core.callbacks import read_samples
from roll.workers.rewards.code_sandbox import extract_program
from roll.workers.rewards.math_verify_grader import grade
from tests.pipeline.demo_cache import prepared_code_judge_demo
from tests.pipeline.helpers import TINY_RLVR, run_pipeline

pytestmark = pytest.mark.usefixtures("ray_session")
STEPS = 1


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from roll.configs import compose_config
    from roll.pipeline.rlvr.config import load_rlvr_config

    demo = prepared_code_judge_demo(tmp_path_factory.mktemp("code_judge_demo"))
    root = tmp_path_factory.mktemp("code_judge_run")
    overrides = [
        f"data_dir={demo}",
        f"output_dir={root / 'out'}",
        f"max_steps={STEPS}",
        "eval_steps=0",
        "track_with=stdout",
        "use_kl_loss=false",  # no reference role: one worker fewer to start; the rewards are under test
    ]
    config = load_rlvr_config(compose_config(str(TINY_RLVR), "rlvr_tiny_code_judge", overrides))
    history = run_pipeline(config, sample_dir=root / "samples")
    samples = [row for step in range(STEPS) for row in read_samples(root / "samples", step + 1)]
    return history, samples


def test_both_domains_give_varying_non_zero_rewards(run):
    history, _ = run
    assert len(history["steps"]) == STEPS
    for step, metrics in history["steps"].items():
        for domain, prompts in (("code", 8), ("judge", 16)):
            assert metrics[f"reward/{domain}/count"] == prompts * 8, (step, domain)
            assert metrics[f"reward/{domain}/errors"] == 0 and metrics[f"reward/{domain}/timeouts"] == 0
            assert metrics[f"reward/{domain}/score/min"] == 0.0 and metrics[f"reward/{domain}/score/max"] == 1.0
            assert 0.0 < metrics[f"reward/{domain}/score/mean"] < 1.0, (step, domain)
        assert metrics["reward/code/sandbox_failures"] == 0 and metrics["reward/code/no_code"] < 64


def test_code_scores_are_sandbox_verdicts_on_programs(run):
    _, samples = run
    code = [r for r in samples if r["tag"] == "code"]
    assert len(code) == 64 * STEPS
    assert all(extract_program(r["response"]) is not None for r in code if r["score"] == 1.0)
    assert {r["score"] for r in code} == {0.0, 1.0}


def test_judge_verdicts_follow_the_answers(run):
    """The judge says YES to right answers and NO to wrong ones (math-verify decides which are right) on nearly
    every logged reply: its verdicts vary with the answer, not at random."""
    _, samples = run
    judged = [r for r in samples if r["tag"] == "math"]
    assert len(judged) == 128 * STEPS
    truth = [grade(r["response"], r["ground_truth"]) for r in judged]
    agree = sum(r["score"] == t for r, t in zip(judged, truth)) / len(judged)
    assert agree >= 0.9, agree
    assert 0 < sum(truth) < len(judged)  # both kinds of answers were judged
