"""One tiny RLVR run with ROLL's five reward domains at once: math rule, code (tests in the sandbox), LLM judge
(its own hf_infer role on the demo model), IFEval rules and CrossThinkQA, each worker named by ROLL's dotted
path. Each domain's samples are graded by its own worker (checked by re-grading the logged responses), and
reward/<domain>/... metrics are logged every step. The tiny demo model writes `\\boxed{n}`, never a
program, so every code sample must count as `no_code` and score 0 — what the code worker decides on real
programs is tested in tests/workers/test_code_reward.py. The prompts are mixed by ROLL's
domain_interleave_probs: each step draws a fixed number of prompts per domain (QUOTA)."""

import json

import pytest
import torch

from roll.pipeline.core.callbacks import read_samples
from roll.utils.math_grader import grade
from roll.workers.rewards.choice_rule import grade_choice
from roll.workers.rewards.crossthinkqa_rule import length_reward
from roll.workers.rewards.ifeval_rule import grade_ifeval
from roll.workers.rewards.llm_judge import chat_completion, parse_verdict
from tests.pipeline.helpers import run_pipeline

pytestmark = pytest.mark.usefixtures("ray_session")
STEPS = 2
DOMAINS = ("math", "code", "judge", "ifeval", "ctqa")
PROBS = {"math": 0.3, "code": 0.2, "judge": 0.2, "ifeval": 0.1, "ctqa": 0.2}
QUOTA = {"math": 3, "code": 2, "judge": 2, "ifeval": 1, "ctqa": 2}  # prompts per step: int(p × 10)
CODE_CASES = [{"stdin": "2 3\n", "expected_stdout": "5\n"}]
JUDGE_PROMPT = "{question} Reply: {response} Score it."
IFEVAL = json.dumps(
    {
        "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
        "kwargs": [{}, {"num_words": 3, "relation": "less than"}],
    }
)


def rewards_block(demo_dir):
    model = str(demo_dir / "model")
    return {
        "rewards": {
            "code": {
                "worker_cls": "roll.pipeline.rlvr.rewards.code_sandbox_reward_worker.CodeSandboxRewardWorker",
                "tag_included": ["code"],
                "world_size": 1,
                "code_case_timeout": 2.0,
            },
            "judge": {
                "worker_cls": "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker",
                "tag_included": ["judge"],
                "world_size": 1,
                "judge_model_type": "inference",
                "judge_prompt": JUDGE_PROMPT,
                "judge_verdict": "score",
                "judge_max_new_tokens": 6,
                "model_args": {"model_name_or_path": model, "dtype": "float32"},
                "strategy_args": {"strategy_name": "hf_infer"},
            },
            "ifeval": {
                "worker_cls": "roll.pipeline.rlvr.rewards.ifeval_rule_reward_worker.GeneralRuleRewardWorker",
                "tag_included": ["ifeval"],
                "world_size": 1,
            },
            "ctqa": {
                "worker_cls": "roll.pipeline.rlvr.rewards.crossthinkqa_rule_reward_worker.CrossThinkQARuleRewardWorker",
                "tag_included": ["crossthinkqa"],
                "world_size": 1,
                "response_length_penalty_coef": 1.0,
            },
        }
    }


@pytest.fixture(scope="module")
def run(rlvr_config, demo_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("reward_domains")
    math_rows = [json.loads(line) for line in (demo_dir / "train.jsonl").read_text().splitlines()[:2]]
    rows = (
        math_rows
        + [
            {**math_rows[0], "tag": "judge"},
            {**math_rows[1], "tag": "judge"},
            {"prompt": "Ann buys 3 coins then 2 coins . How many coins ?", "ground_truth": IFEVAL, "tag": "ifeval"},
            {"prompt": "Tom buys 2 books then 2 books . How many books ?", "ground_truth": IFEVAL, "tag": "ifeval"},
            {"prompt": "Sue buys 1 pen then 1 pen . A 2 B 3", "ground_truth": "A", "tag": "crossthinkqa"},
            {"prompt": "Leo buys 2 pen then 1 pen . A 4 B 3", "ground_truth": "B", "tag": "crossthinkqa"},
        ]
        + [  # code rows in ROLL's columns (test_cases, case_type) on the demo's prompts (its vocabulary)
            {"prompt": row["prompt"], "tag": "code", "test_cases": json.dumps(CODE_CASES), "case_type": "input"}
            for row in math_rows
        ]
    )
    train = root / "mixed.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    overrides = [f"max_steps={STEPS}", f"actor_train.data_args.file_name={train}", "validation=null"]
    mix = ",".join(f"{domain}:{p}" for domain, p in PROBS.items())
    overrides += [
        "rollout_batch_size=10",
        "allow_repeated_prompts_in_step=true",  # 2 rows a domain, math's quota is 3: repeats are fine here
        "actor_train.infer_batch_size=40",
        f"actor_train.data_args.domain_interleave_probs={{{mix}}}",
    ]
    overrides += ["use_kl_loss=false", "~reference"]  # one role fewer to start: the rewards are under test
    config = rlvr_config(root / "out", overrides, blocks=rewards_block(demo_dir))
    history = run_pipeline(config, sample_dir=root / "samples")
    return config, history, [row for step in range(STEPS) for row in read_samples(root / "samples", step + 1)]


def test_every_domain_is_logged_each_step(run):
    _, history, _ = run
    assert len(history["steps"]) == STEPS
    for metrics in history["steps"].values():
        for domain in DOMAINS:
            assert metrics[f"reward/{domain}/count"] == QUOTA[domain] * 4  # 4 samples per prompt
            assert metrics[f"reward/{domain}/errors"] == 0 and metrics[f"reward/{domain}/timeouts"] == 0
            assert metrics[f"reward/{domain}/score/min"] <= metrics[f"reward/{domain}/score/mean"]
        assert metrics["reward/code/no_code"] == QUOTA["code"] * 4 and metrics["reward/code/pass_rate"] == 0.0
        assert metrics["reward/code/sandbox_failures"] == 0 and metrics["reward/code/score/max"] == 0.0


def test_rule_domains_score_the_logged_responses(run):
    _, _, samples = run
    by_tag = {tag: [r for r in samples if r["tag"] == tag] for tag in ("math", "ifeval", "crossthinkqa")}
    quota = {"math": QUOTA["math"], "ifeval": QUOTA["ifeval"], "crossthinkqa": QUOTA["ctqa"]}
    assert {tag: len(rows) for tag, rows in by_tag.items()} == {tag: q * 4 * STEPS for tag, q in quota.items()}
    for r in by_tag["math"]:
        assert r["score"] == grade(r["response"], r["ground_truth"])
    for r in by_tag["ifeval"]:
        assert r["score"] == grade_ifeval(r["response"], r["ground_truth"], r["prompt"])
    width_penalty = length_reward(6)  # response_length 6: the padded width, < 100 → −0.5
    for r in by_tag["crossthinkqa"]:
        expected = torch.tensor(grade_choice(r["response"], r["ground_truth"]), dtype=torch.float16) + torch.tensor(
            width_penalty, dtype=torch.float16
        )
        assert r["score"] == float(expected)
    assert {r["score"] for r in by_tag["crossthinkqa"]} <= {-0.5, 0.5}


def test_judge_scores_are_the_judge_models_verdicts(run, demo_dir):
    """The same model served over HTTP, asked the same prompt greedily, gives the verdict the pipeline used."""
    from tests.pipeline.test_reward_workers import serve

    rows = [r for r in run[2] if r["tag"] == "judge"]
    assert len(rows) == QUOTA["judge"] * 4 * STEPS
    with serve(demo_dir / "model") as url:
        for r in rows:
            prompt = JUDGE_PROMPT.format(question=r["prompt"], response=r["response"], reference=r["ground_truth"])
            reply = chat_completion(url, "judge", prompt, max_tokens=6, timeout=60, retries=0)
            assert r["score"] == pytest.approx(parse_verdict(reply, "score", 10.0)), (prompt, reply)
