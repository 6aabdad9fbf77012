"""ROLL's reward domains in one pipeline run: rows routed by tag to math and code workers (the code worker
named by ROLL's dotted path), each domain's own metrics in the step's history. The tiny demo model writes
`\\boxed{n}`, never a program, so every code sample must be counted as `no_code` and score 0 — what the
code worker decides on real replies is tested in tests/workers/test_code_reward.py."""

import json

import pytest

from tests.pipeline.helpers import run_pipeline

pytestmark = pytest.mark.usefixtures("ray_session")
CODE_TRUTH = {"case_type": "input", "test_cases": [{"stdin": "2 3\n", "expected_stdout": "5\n"}]}


@pytest.fixture(scope="module")
def history(rlvr_config, demo_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("reward_domains")
    rows = [json.loads(line) for line in (demo_dir / "train.jsonl").read_text().splitlines()[:8]]
    math_rows = rows[:4]
    # the demo's prompts (the tiny model's vocabulary and prompt_length), as code rows in ROLL's columns
    code_rows = [
        {"prompt": row["prompt"], "tag": "code", "ground_truth": None}
        | {"test_cases": json.dumps(CODE_TRUTH["test_cases"]), "case_type": "input"}
        for row in rows[4:]
    ]
    data = root / "mixed.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in math_rows + code_rows))
    blocks = {
        "rewards": {
            "code": {
                "worker_cls": "roll.pipeline.rlvr.rewards.code_sandbox_reward_worker.CodeSandboxRewardWorker",
                "tag_included": ["code"],
                "world_size": 1,
                "code_case_timeout": 2.0,
            }
        }
    }
    config = rlvr_config(root / "out", ["max_steps=1", f"actor_train.data_args.file_name={data}"], blocks=blocks)
    return run_pipeline(config)["steps"][0]


def test_each_domain_is_scored_and_logged(history):
    samples_per_domain = 4 * 4  # 4 prompts × 4 samples
    assert history["reward/code/no_code"] == samples_per_domain
    assert history["reward/code/pass_rate"] == 0.0
    assert history["reward/code/sandbox_failures"] == 0 and history["reward/code/errors"] == 0
    assert history["reward/math/errors"] == 0 and history["reward/math/timeouts"] == 0
    assert history["critic/score/mean"] > 0  # math samples (half the batch) are graded: some are right
