"""The pure on-policy distillation config (ROLL's `is_pure_opd`, forced on by its launcher): an RLVR config whose
student roles are ROLL's `student_train` / `student_infer` and whose advantages are A = −Σ_n c_n·KL_n, the teachers'
KL of the student's own tokens (docs/onpolicy_distill.md; the maths: roll.algorithms.opd).

As in ROLL's pure mode, `student_train` / `student_infer` *are* the `actor_train` / `actor_infer` roles (ROLL copies
them there); the rewards still run (their scores are reported, never trained on) and the RL estimator, gamma and
values are not read.
"""

import re
from dataclasses import dataclass

from roll.configs.loader import ConfigError, field_help
from roll.pipeline.rlvr.config import RLVRConfig

STUDENT_ROLES = {"student_train": "actor_train", "student_infer": "actor_infer"}
_CLAIM = re.compile(r"(?m)^student_(train|infer)\s*:")


@dataclass
class OnPolicyDistillConfig(RLVRConfig):
    KIND = "onpolicy_distill"
    PIPELINE = "roll.pipeline.onpolicy_distill.pipeline.run_pipeline"
    DEFAULT_CONFIG = ("onpolicy_distill_demo", "onpolicy_distill_tiny")

    is_pure_opd: bool = field_help(
        True,
        "pure on-policy distillation (ROLL's key; ROLL's launcher forces it true): the advantages are −Σ over the "
        "teachers of opd_kl_coef × KL(student ‖ teacher) per response token. false is refused here: RL plus the "
        "teachers' KL is `use_opd: true` in examples/start_rlvr_pipeline.py or start_agentic_pipeline.py",
    )
    pure_opd_pipeline_type: str = field_help(
        "rlvr",
        "the pipeline pure OPD runs on (ROLL's key): rlvr (prompts, the student's samples scored by the teachers). "
        "ROLL's 'agentic' is not built here (refused with the alternative)",
    )

    @property
    def opd_mode(self) -> str:
        return "pure"

    def validate(self) -> None:
        if not self.is_pure_opd:
            raise ConfigError(
                "'is_pure_opd' = false: this launcher runs pure on-policy distillation (ROLL's launcher sets it "
                "true whatever the YAML says); for RL advantages minus the teachers' KL set use_opd: true and run "
                "examples/start_rlvr_pipeline.py, or remove is_pure_opd"
            )
        if self.use_opd:
            raise ConfigError(
                "'use_opd' and pure on-policy distillation are exclusive (ROLL raises too): remove use_opd (this "
                "launcher's advantages are the teachers' KL alone) or run examples/start_rlvr_pipeline.py"
            )
        if self.pure_opd_pipeline_type != "rlvr":
            agentic = self.pure_opd_pipeline_type == "agentic"
            raise ConfigError(
                f"'pure_opd_pipeline_type' = {self.pure_opd_pipeline_type!r}: "
                + (
                    "pure on-policy distillation on the agentic pipeline is not built here; the agentic pipeline "
                    "takes use_opd: true (RL advantages minus the teachers' KL: examples/start_agentic_pipeline.py)"
                    if agentic
                    else "valid: 'rlvr' (ROLL's also 'agentic', not built here)"
                )
            )
        if self.critic is not None:
            raise ConfigError(
                "'critic' is configured, but pure on-policy distillation reads no values (the advantages are the "
                "teachers' KL alone): remove 'critic'"
            )
        super().validate()

    def start_up_checks(self, tokenizer_dir: str) -> list:
        return [*super().start_up_checks(tokenizer_dir), lambda: check_teacher_vocabularies(self, tokenizer_dir)]

    def describe_notes(self) -> list[str]:
        return [
            *super().describe_notes(),
            f"pure OPD: the rewards are reported, not trained on; adv_estimator {self.adv_estimator!r}, gamma and "
            "the values are not read",
        ]

    # ---- ROLL's YAMLs ----------------------------------------------------------------------------------------
    @classmethod
    def claims_roll_example(cls, text: str) -> bool:
        return bool(_CLAIM.search(text))

    @classmethod
    def roll_translate(cls, data: dict, problems: list, first: bool) -> None:
        """ROLL's student roles become the actor roles (ROLL's pure mode: actor_train ← student_train), first, so
        the role aliases then apply to them."""
        if first:
            for student, actor in STUDENT_ROLES.items():
                if student not in data:
                    continue
                block = data.pop(student)
                if data.get(actor) is not None:
                    problems.append((student, f"both '{student}' and '{actor}' are set: they are one role; keep one"))
                    continue
                if isinstance(block, dict):
                    if "name" in block:
                        problems.append((f"{student}.name", "is set from the role's key; remove it"))
                    block["name"] = actor
                data[actor] = block
        super().roll_translate(data, problems, first)


def check_teacher_vocabularies(config, student_dir: str) -> None:
    """A teacher scores the student's token ids, so its tokenizer must map every id to the same token as the
    student's (ROLL assumes it too, unchecked). Teachers whose directory holds no tokenizer are not checked."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from roll.configs.opd import teacher_roles

    student = AutoTokenizer.from_pretrained(student_dir).get_vocab()
    for role, worker in teacher_roles(config).items():
        path = Path(worker.model_args.model_name_or_path).expanduser()
        if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
            continue
        teacher = AutoTokenizer.from_pretrained(str(path)).get_vocab()
        if teacher != student:
            differ = sorted(set(teacher.items()) ^ set(student.items()), key=lambda item: item[1])[:3]
            raise ConfigError(
                f"'{role}.model_args.model_name_or_path' = {str(path)!r}: its tokenizer differs from the student's "
                f"({student_dir}; {len(teacher)} vs {len(student)} tokens, e.g. {differ}): a teacher scores the "
                "student's token ids, so both need the same vocabulary"
            )
