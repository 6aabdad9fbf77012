"""`use_opd` in an RLVR config (ROLL's mixed on-policy distillation): the teacher roles it adds, what --dry_run
says, and the rules (ROLL's keys; its bugs refused with the reason: 'full', a shape error in ROLL)."""

from pathlib import Path

import pytest

from roll.configs import ConfigError, compose_config, describe_config
from roll.pipeline.rlvr.config import load_rlvr_config

TINY = str(Path(__file__).resolve().parents[2] / "examples" / "tiny_rlvr")
OPD = [
    "use_opd=true",
    "~reference",
    "use_kl_loss=false",
    "+teacher.model_args.model_name_or_path=./teacher",
    "+teacher.strategy_args.strategy_name=hf_infer",
    "+teacher.device_mapping=list(range(0,1))",
]


def tiny(*overrides):
    return load_rlvr_config(compose_config(TINY, "rlvr_tiny", [*OPD, *overrides]))


def error_of(*overrides, base=OPD) -> str:
    with pytest.raises(ConfigError) as info:
        load_rlvr_config(compose_config(TINY, "rlvr_tiny", [*base, *overrides]))
    return str(info.value)


def test_one_teacher_is_a_model_role_colocated_like_the_reference():
    config = tiny("+teacher.opd_kl_coef=0.5")
    assert list(config.roles())[:3] == ["actor_train", "actor_infer", "teacher"]
    assert config.teacher.name == "teacher" and config.teacher.opd_kl_coef == 0.5
    assert config.fingerprint()["opd"] == "mixed: teacher"
    described = describe_config(config)
    assert "device   0: actor_train[0], teacher[0]" in described
    assert "on-policy distillation (mixed): A = A_RL − Σ c·KL" in described
    assert "  teacher: opd_kl_coef 0.5, every row" in described


def test_the_rules_name_the_key_and_the_fix():
    assert "'kl_penalty' = 'full' is not an on-policy distillation estimator" in error_of("kl_penalty=full")
    assert "'teacher.tag_included' names ['code']" in error_of("+teacher.tag_included=[code]")
    assert "unknown key 'teacher.bogus'" in error_of("+teacher.bogus=1")
    assert "set use_kl_loss: false" in error_of("use_kl_loss=true")
    assert "remove 'reference'" in error_of(base=[key for key in OPD if key != "~reference"])
    assert "'teacher' is configured but use_opd is false" in error_of("use_opd=false")
    assert "use_opd: true needs 'teacher'" in error_of(base=["use_opd=true", "~reference", "use_kl_loss=false"])
