"""The distillation pipeline end to end on CPU (Ray, DeepSpeed student, hf_infer teacher; the shipped demo's YAML
with its tiny models): four steps learn (training and validation losses fall, ROLL's metric names), the last step's
student is a loadable HF folder, a run resumed from step 2 repeats steps 3-4 of the uninterrupted run exactly, and two
data-parallel student ranks (with two teacher ranks, colocated), both roles packing their rows, train as one rank
with padded rows on the same rows."""

import pytest

from roll.pipeline.distill.pipeline import DISTILL, LOSS, STUDENT, VAL_LOSS, DistillPipeline, final_model_dir
from tests.pipeline.distill_helpers import distill_config, prepared_distill_demo

KEYS = (LOSS, DISTILL, STUDENT, "student/grad_norm", "student/lr")


@pytest.fixture(scope="module")
def distill_demo(tmp_path_factory):
    return prepared_distill_demo(tmp_path_factory.mktemp("distill_demo"))


def _run(config) -> dict:
    with DistillPipeline(config) as pipeline:
        return pipeline.run()


def test_distillation_learns_saves_and_resumes_exactly(distill_demo, tmp_path, ray_session):
    steps = ("max_steps=4", "save_steps=2", "eval_steps=2")
    config = distill_config(distill_demo, tmp_path / "whole", *steps)
    whole = _run(config)
    first, last = whole["steps"][0], whole["steps"][3]
    assert all(key in first for key in KEYS)
    assert last[LOSS] < first[LOSS] and last[DISTILL] < first[DISTILL]
    assert first[LOSS] == pytest.approx(0.15 * first[STUDENT] + 0.85 * first[DISTILL], rel=1e-5)
    assert last[VAL_LOSS] < whole["before"][VAL_LOSS]
    assert (final_model_dir(config) / "model.safetensors").is_file()

    resume = f"resume_from_checkpoint={tmp_path / 'whole' / 'checkpoints' / 'step-2'}"
    resumed = _run(distill_config(distill_demo, tmp_path / "resumed", *steps, resume))
    assert resumed["first_step"] == 2
    for step in (2, 3):
        for key in (*KEYS, VAL_LOSS):
            assert resumed["steps"][step].get(key) == whole["steps"][step].get(key), (step, key)

    # DP 2 packed = DP 1 padded: the same 32 rows per step split over two ranks of each role (colocated on both
    # devices), every micro-batch packed into one row for both roles' forwards
    two = ("student.device_mapping=list(range(0,2))", "teacher.device_mapping=list(range(0,2))",
           "student.use_sequence_packing=true", "teacher.use_sequence_packing=true")  # fmt: skip
    dp2 = _run(distill_config(distill_demo, tmp_path / "dp2", "max_steps=2", "eval_steps=0", *two,
                              "student.training_args.per_device_train_batch_size=16"))  # fmt: skip
    for step in (0, 1):
        for key in (LOSS, DISTILL, STUDENT):
            assert dp2["steps"][step][key] == pytest.approx(whole["steps"][step][key], rel=1e-5), (step, key)
