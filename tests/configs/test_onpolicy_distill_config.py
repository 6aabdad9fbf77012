"""The on-policy distillation kind's config (examples/onpolicy_distill_demo): ROLL's student roles become the actor
roles, pure mode's rules, and the ROLL-YAML claim."""

from pathlib import Path

import pytest

from roll.configs import ConfigError, compose_config, load_config
from roll.pipeline.onpolicy_distill.config import OnPolicyDistillConfig

DEMO = str(Path(__file__).resolve().parents[2] / "examples" / "onpolicy_distill_demo")


def demo(*overrides):
    return load_config(OnPolicyDistillConfig, compose_config(DEMO, "onpolicy_distill_tiny", list(overrides)))


def error_of(*overrides) -> str:
    with pytest.raises(ConfigError) as info:
        demo(*overrides)
    return str(info.value)


def test_student_roles_are_the_actor_roles_and_the_advantages_pure():
    config = demo()
    assert config.actor_train.name == "actor_train" and config.actor_infer.name == "actor_infer"
    assert config.actor_train.model_args.model_name_or_path == "./demo_data/model"
    assert config.opd_mode == "pure" and config.fingerprint()["opd"] == "pure: teacher"
    assert list(config.roles())[:3] == ["actor_train", "actor_infer", "teacher"]


def test_pure_mode_rules():
    assert "'is_pure_opd' = false" in error_of("is_pure_opd=false")
    assert "'use_opd' and pure on-policy distillation are exclusive" in error_of("use_opd=true")
    assert "pure on-policy distillation on the agentic pipeline is not built" in error_of(
        "pure_opd_pipeline_type=agentic"
    )
    assert "both 'student_train' and 'actor_train' are set" in error_of("+actor_train.world_size=1")
    assert "'teacher.bogus'" in error_of("+teacher.bogus=1")
    assert error_of("~teacher", "~teacher_path").startswith("on-policy distillation needs 'teacher'")


def test_claims_rolls_opd_yamls_only():
    assert OnPolicyDistillConfig.claims_roll_example("x: 1\nstudent_train:\n  model_args: {}\n")
    assert not OnPolicyDistillConfig.claims_roll_example("student:\n  model_args: {}\nteacher:\n  x: 1\n")


def test_a_teacher_with_another_vocabulary_is_refused_at_start_up(tmp_path):
    from roll.demo.tiny_model import build_tokenizer
    from roll.pipeline.onpolicy_distill.config import check_teacher_vocabularies

    for name, texts in (("student", ["one two three"]), ("same", ["one two three"]), ("other", ["four five"])):
        build_tokenizer(texts).save_pretrained(tmp_path / name)
    (tmp_path / "no_tokenizer").mkdir()
    config = demo()
    for teacher in ("same", "no_tokenizer"):  # a folder without tokenizer files is not checked
        config.teacher.model_args.model_name_or_path = str(tmp_path / teacher)
        check_teacher_vocabularies(config, str(tmp_path / "student"))
    config.teacher.model_args.model_name_or_path = str(tmp_path / "other")
    with pytest.raises(ConfigError, match=r"'teacher.model_args.model_name_or_path' = .*its tokenizer differs"):
        check_teacher_vocabularies(config, str(tmp_path / "student"))
