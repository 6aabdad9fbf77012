"""Validation with 2 samples per prompt (validation.generating_args.num_return_sequences=2) in a real RLVR
pipeline (1 step, validation before and after): val/score and val/pass@k per tag and over all prompts, on
held-out prompts of two tags, with actor_infer on 2 workers so that the validation chunks
(val_batch_size=5 prompts) are padded."""

import json

import pytest

from roll.distributed.data_proto import DataProto
from roll.pipeline.core.callbacks import read_samples
from roll.pipeline.rlvr.validation_metrics import validation_metrics
from tests.pipeline.helpers import run_pipeline

pytestmark = pytest.mark.usefixtures("ray_session")
PROMPTS, SAMPLES, VAL_BATCH = 24, 2, 5


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
    assert metrics == pytest.approx(validation_metrics(batch.batch["scores"].numpy(), tags, SAMPLES))
    for when in ("before", "after"):
        got = history[when]
        for name in ("math", "math_b", "all"):
            # 0/1 rewards: pass@1 is the mean score; a second sample can only help
            assert got[f"val/pass@1/{name}"] == pytest.approx(got[f"val/score/{name}"])
            assert got[f"val/pass@2/{name}"] >= got[f"val/pass@1/{name}"]
    assert history["after"] == pytest.approx(metrics)  # the pipeline's own last validation
