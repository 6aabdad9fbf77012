"""One RLVR pipeline (1 step, validation before and after) for two defects of issue 15:

- validation with 2 samples per prompt (validation.generating_args.num_return_sequences=2): val/score and
  val/pass@k per tag and over all prompts, on held-out prompts of two tags, with actor_infer on 2 workers so
  that the validation chunks (val_batch_size=5 prompts) are padded;
- grading failures reach the step metrics: in every call to the math domain's worker the grader raises on
  the first row and hangs past rewards.math.timeout on the second; those samples score 0 and are counted in
  reward/math/errors and reward/math/timeouts (val/reward/... in validation).
"""

import json
import time

import pytest

from roll.distributed.data_proto import DataProto
from roll.pipeline.core.callbacks import read_samples
from roll.pipeline.rlvr.validation_metrics import validation_metrics
from roll.utils.math_grader import grade_math
from roll.workers.rewards.math_rule import MathRuleRewardWorker
from tests.pipeline.helpers import run_pipeline

pytestmark = pytest.mark.usefixtures("ray_session")
PROMPTS, SAMPLES, VAL_BATCH = 24, 2, 5


class FailingMathReward(MathRuleRewardWorker):  # travels to the Ray worker by value (ship_by_value)
    def score(self, batch):
        rows = iter(range(len(batch)))  # grade_rows grades the rows in order

        def grade(response: str, truth: str) -> float:
            row = next(rows)
            if row == 0:
                raise ArithmeticError("grader bug")
            if row == 1:
                time.sleep(5)  # past rewards.math.timeout
            return grade_math(response, truth)

        return self.grade_rows(batch, grade)


@pytest.fixture(scope="module")
def run(rlvr_config, demo_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("validation_and_grading")
    rows = [json.loads(line) for line in (demo_dir / "heldout.jsonl").read_text().splitlines()][:PROMPTS]
    for index, row in enumerate(rows):
        row["tag"] = "math" if index % 2 else "math_b"
    (root / "val.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = rlvr_config(
        root / "out",
        [
            "max_steps=1",
            "eval_steps=1",
            "use_kl_loss=false",  # no reference role: one start-up fewer
            "actor_infer.device_mapping=[0,1]",
            f"validation.data_args.file_name={root / 'val.jsonl'}",
            "rewards.math.tag_included=[math,math_b]",
            f"validation.generating_args.num_return_sequences={SAMPLES}",
            "validation.generating_args.do_sample=true",
            f"val_batch_size={VAL_BATCH}",
            f"rewards.math.worker_cls={__name__}.FailingMathReward",
            "rewards.math.timeout=0.5",  # initialize() warmed math-verify up: a real grade takes milliseconds
        ],
    )

    def validate_again(pipeline) -> dict:
        """The last validation again (same seed, same weights), keeping the scored batches."""
        scored, compute_rewards = [], pipeline.compute_rewards
        pipeline.compute_rewards = lambda batch: scored.append(compute_rewards(batch)) or scored[-1]
        return {"metrics": pipeline.validate(1), "batch": DataProto.concat(scored)}

    history = run_pipeline(config, sample_dir=root / "samples", inspect=validate_again)
    return {"history": history, "rows": rows, "samples": read_samples(root / "samples", 1)}


def test_validation_with_two_samples_per_prompt(run):
    history, rows = run["history"], run["rows"]
    again = history["inspected"]
    batch, metrics = again["batch"], again["metrics"]
    assert len(batch) == PROMPTS * SAMPLES  # padding rows of the 2-worker chunks dropped
    # prompt-major: samples 2i and 2i+1 answer prompt i
    assert list(batch.non_tensor_batch["prompt_text"][::SAMPLES]) == list(
        batch.non_tensor_batch["prompt_text"][1::SAMPLES]
    )
    truths = list(batch.non_tensor_batch["ground_truth"])
    assert truths[::SAMPLES] == truths[1::SAMPLES] == [row["ground_truth"] for row in rows]
    responses = batch.non_tensor_batch["response_text"]
    assert any(responses[::SAMPLES] != responses[1::SAMPLES])  # do_sample: the two samples differ
    tags = [row["tag"] for row in rows]
    assert {k: v for k, v in metrics.items() if not k.startswith("val/reward/")} == pytest.approx(
        validation_metrics(batch.batch["scores"].numpy(), tags, SAMPLES)
    )
    for when in ("before", "after"):
        got = history[when]
        for name in ("math", "math_b", "all"):
            # 0/1 rewards: pass@1 is the mean score; a second sample can only help
            assert got[f"val/pass@1/{name}"] == pytest.approx(got[f"val/score/{name}"])
            assert got[f"val/pass@2/{name}"] >= got[f"val/pass@1/{name}"]
    assert history["after"] == pytest.approx(metrics)  # the pipeline's own last validation


def test_grading_failures_reach_the_step_and_validation_metrics(run):
    history, samples = run["history"], run["samples"]
    step = history["steps"][0]  # one call: the 32 samples of the step go to the one reward worker
    assert (step["reward/math/errors"], step["reward/math/timeouts"]) == (1, 1)
    assert [row["score"] for row in samples[:2]] == [0.0, 0.0]
    assert any(row["score"] == 1.0 for row in samples)  # the other rows are graded as usual
    calls = -(-PROMPTS // VAL_BATCH)  # validation chunks of val_batch_size prompts
    for when in ("before", "after"):
        assert (history[when]["val/reward/math/errors"], history[when]["val/reward/math/timeouts"]) == (calls, calls)
