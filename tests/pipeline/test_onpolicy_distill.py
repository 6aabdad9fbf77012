"""On-policy distillation end to end (real Ray + DeepSpeed + HF on CPU): the kind's shipped demo YAML (student
roles under ROLL's names) with two teachers for two steps (e2e), and the shipped demo learning (learning tier).
`use_opd` (mixed) differs from this only in the advantage step, tested on hand-computed numbers in
tests/pipeline/test_opd_step.py.

Teachers: `expert`, the demo's trained teacher (roll.demo.teacher, from the build cache), routed by tag
(tag_included [math]); `self`, the student's own starting weights, on every row with opd_kl_coef 0.5 — a
teacher whose log-probs must equal the student's old ones at step 1, so its KL there is 0 to float precision
while the expert's is not.
"""

import dataclasses

import pytest
from omegaconf import OmegaConf

from tests.build_cache import cached_copy
from tests.pipeline.demo_cache import one_thread
from tests.pipeline.helpers import SMALL_RUN, TINY_RLVR, run_pipeline

pytestmark = pytest.mark.usefixtures("ray_session")

OPD_DEMO = TINY_RLVR.parent / "onpolicy_distill_demo"


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    from roll.demo.teacher import TeacherSettings, prepare_teacher

    settings = TeacherSettings()

    def build(out):
        with one_thread():
            prepare_teacher(out, settings, log=lambda *_: None)
        (out.parent / f".{out.name}.lock").unlink(missing_ok=True)

    return cached_copy(tmp_path_factory.mktemp("teacher"), "demo-teacher", ["roll.demo.teacher"],
                       dataclasses.asdict(settings), build)  # fmt: skip


def _two_teachers(demo_dir, teacher_dir) -> dict:
    common = {"strategy_args": {"strategy_name": "hf_infer"}, "infer_batch_size": 32}
    return {
        "expert": {"model_args": {"model_name_or_path": str(teacher_dir), "dtype": "float32"},
                   "device_mapping": "list(range(0, 1))", "tag_included": ["math"], **common},
        "self": {"model_args": {"model_name_or_path": str(demo_dir / "model"), "dtype": "float32"},
                 "device_mapping": "list(range(1, 2))", "opd_kl_coef": 0.5, **common},
    }  # fmt: skip


def _compose(path, name, overrides, teacher: dict):
    from roll.configs import compose_config

    composed = compose_config(str(path), name, ["~teacher", "~teacher_path", *overrides])
    OmegaConf.set_struct(composed, False)
    return OmegaConf.merge(composed, OmegaConf.create({"teacher": teacher}))


def _small(demo_dir, out, role):
    small = [item.replace("actor_train.", f"{role}.") for item in SMALL_RUN]
    return [
        f"model_path={demo_dir / 'model'}",
        f"{role}.data_args.file_name={demo_dir / 'train.jsonl'}",
        f"validation.data_args.file_name={demo_dir / 'heldout.jsonl'}",
        f"output_dir={out}",
        *small,
    ]


def test_pure_opd_with_two_routed_teachers(demo_dir, teacher_dir, tmp_path):
    from roll.configs import load_config
    from roll.pipeline.onpolicy_distill.config import OnPolicyDistillConfig

    overrides = [*_small(demo_dir, tmp_path / "out", "student_train"), "max_steps=2"]
    composed = _compose(OPD_DEMO, "onpolicy_distill_tiny", overrides, _two_teachers(demo_dir, teacher_dir))
    config = load_config(OnPolicyDistillConfig, composed)
    assert [role for role in config.roles() if role.startswith("teacher")] == ["teacher.expert", "teacher.self"]
    history = run_pipeline(config)
    first, second = history["steps"][0], history["steps"][1]
    tokens = first["opd/teacher.self/tokens"]
    assert tokens > 0 and first["opd/teacher.expert/tokens"] == tokens  # one domain (math): both take every row
    assert abs(first["opd/teacher.self/kl"]) < 1e-4, first["opd/teacher.self/kl"]  # the student's own weights
    assert first["opd/teacher.expert/kl"] > 0.5  # the expert disagrees with the untrained student
    assert first["opd/kl"] == pytest.approx(first["opd/teacher.expert/kl"] + 0.5 * first["opd/teacher.self/kl"])
    # the student moved (its KL to its own starting weights is no longer 0) and trained on finite losses
    assert abs(second["opd/teacher.self/kl"]) > 1e-3
    assert all(step["actor/pg_loss"] == step["actor/pg_loss"] for step in (first, second))


def test_shipped_demo_learns_from_the_teacher_alone(teacher_dir, tmp_path_factory):
    """The shipped config on the shipped preparation, 15 of its 40 steps: the held-out greedy accuracy rises by
    at least 25 points with no reward in the loss (measured: 0.000 → 0.375 at step 15, 0.875 at step 40)."""
    from roll.configs import compose_config, load_config
    from roll.demo.rlvr import DemoSettings
    from roll.pipeline.onpolicy_distill.config import OnPolicyDistillConfig
    from tests.pipeline.demo_cache import prepared_demo

    demo = prepared_demo(tmp_path_factory.mktemp("demo_default"), DemoSettings())
    overrides = [
        f"model_path={demo / 'model'}",
        f"teacher_path={teacher_dir}",
        f"student_train.data_args.file_name={demo / 'train.jsonl'}",
        f"validation.data_args.file_name={demo / 'heldout.jsonl'}",
        f"output_dir={tmp_path_factory.mktemp('out')}",
        "max_steps=15",
        "eval_steps=15",
        "track_with=stdout",
    ]
    config = load_config(OnPolicyDistillConfig, compose_config(str(OPD_DEMO), "onpolicy_distill_tiny", overrides))
    history = run_pipeline(config)
    before, after = history["before"]["val/score/all"], history["steps"][14]["val/score/all"]
    assert after >= before + 0.25, f"held-out accuracy {before:.3f} -> {after:.3f}"
    kl = [history["steps"][s]["opd/kl"] for s in range(15)]
    assert sum(kl[-5:]) < sum(kl[:5]), kl  # the student moves towards the teacher
