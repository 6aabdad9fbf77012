"""The offline distillation pipeline config: ROLL's `DistillConfig` keys (docs/distill.md).

Two model roles: `student` (trained) and `teacher` (forward only). Each step the teacher scores the step's rows
and sends its top-k distribution per position (`logits_topk`, temperatures); the student trains on
(1 − w)·CE + w·D, D the `kd_objective` divergence from the teacher (roll.algorithms.distill), both token means
over the step's label tokens.
"""

import math
import re
from dataclasses import dataclass
from typing import Literal

from roll.algorithms.divergences import KD_OBJECTIVES
from roll.configs.base import PipelineConfig
from roll.configs.checks import (
    check_micro_batching,
    check_model_types,
    check_roles,
    check_strategy_configs,
    data_parallel_size,
    roles,
)
from roll.configs.loader import ConfigError, field_help
from roll.configs.profiler import check_profiler
from roll.configs.roles import RoleSpec
from roll.configs.worker import DataArgs, TrainingArgs, WorkerConfig

STUDENT_WORKER = "roll.pipeline.distill.worker.StudentWorker"
TEACHER_WORKER = "roll.pipeline.distill.worker.TeacherWorker"
ROLL_WORKERS = {  # ROLL's paths of the same workers
    "roll.pipeline.distill.distill_worker.StudentWorker": STUDENT_WORKER,
    "roll.pipeline.distill.distill_worker.TeacherWorker": TEACHER_WORKER,
}
TRANSFER_BACKENDS = ("ipc+nccl", "nccl-only", "ray")
_ROLL_DISTILL = re.compile(r"^(teacher_pretrain|student):", re.M)  # not OPD's: student_train, student_infer, teacher


@dataclass
class DistillValidationConfig:
    data_args: DataArgs = field_help(
        default_factory=DataArgs,
        help="held-out (question, answer) rows (file_name), encoded as the training rows with the student's "
        "template; their token-mean cross-entropy is student/val_loss",
    )


STUDENT = RoleSpec("student", STUDENT_WORKER, "train", trained=True, roll_model_key="student_pretrain")
TEACHER = RoleSpec("teacher", TEACHER_WORKER, "score", roll_model_key="teacher_pretrain")


@dataclass
class DistillConfig(PipelineConfig):
    KIND = "distill"
    ROLES = (STUDENT, TEACHER)
    PIPELINE = "roll.pipeline.distill.pipeline.run_pipeline"
    DEFAULT_CONFIG = ("distill_demo", "distill_tiny")
    EPOCHS_ROLE = "student"
    ROLL_DATA_BLOCKS = ("student", "teacher", "validation")
    DOC_SECTIONS = (("`validation` (distill)", DistillValidationConfig),)

    student: WorkerConfig | None = field_help(None, "the trained model (a training strategy); data_args: the rows")
    teacher: WorkerConfig | None = field_help(
        None,
        "the model distilled from (a scoring strategy: hf_infer, deepspeed_infer, fsdp2_infer, megatron_infer); its "
        "forward micro-batch is training_args.per_device_train_batch_size (ROLL's meaning)",
    )
    validation: DistillValidationConfig | None = field_help(
        None, "held-out rows whose token-mean cross-entropy is student/val_loss every eval_steps"
    )
    sequence_length: int | None = field_help(
        None,
        "required: every row (chat template included) is cut to and right-padded to this many tokens (ROLL's "
        "truncation; the number of cut rows is logged)",
        bounds="[2, inf)",
    )
    question_key: str = field_help("question", "column of the user's question (the user turn is '\\n' + question)")
    answer_key: str = field_help("answer", "column of the assistant's answer")
    logits_topk: int = field_help(
        64, "teacher entries kept per position (renormalised over them); 0 = the full vocabulary", bounds="[0, inf)"
    )
    distill_loss_weight: float = field_help(
        0.5, "w: loss = (1 − w)·CE + w·divergence, both token means over the label tokens", bounds="[0, 1]"
    )
    kd_temperature: float = field_help(
        1.0, "τ: divides the student's logits (divergence only) and the teacher's", bounds="(0, inf)"
    )
    teacher_temperature: float = field_help(1.0, "τ_t: further divides the teacher's logits", bounds="(0, inf)")
    kd_objective: Literal[
        "forward_kl", "reverse_kl", "adaptive_kl", "skewed_forward_kl", "skewed_reverse_kl", "js_divergence"
    ] = field_help("forward_kl", f"the divergence: one of {', '.join(KD_OBJECTIVES)} (docs/algorithms.md)")
    adaptive_kl_alpha: float = field_help(0.5, "α of adaptive_kl (the head/tail split of p)", bounds="[0, 1]")
    skew_lambda: float = field_help(0.1, "λ of skewed_forward_kl / skewed_reverse_kl", bounds="[0, 1]")
    distill_on_prompt: bool = field_help(False, "the labels also cover the prompt tokens (every real token)")
    max_grad_norm: float = field_help(
        0.0,
        "the student's gradient-clipping threshold (ROLL's DistillConfig key, default 0); ≤ 0 = no clipping on "
        "every strategy (ROLL's FSDP2 would zero the update). Sets student.training_args.max_grad_norm",
        bounds="(-inf, inf)",
    )
    logits_transfer_backend: Literal["ipc+nccl", "nccl-only", "ray"] = field_help(
        "ipc+nccl",
        "how the teacher's top-k reaches the student in ROLL (transport only: the numbers are the same); roll "
        "sends them through Ray's object store whatever the value (--dry_run says so)",
    )

    def validate(self) -> None:
        """The rules that join fields of several blocks; every problem of the rules after check_roles at once (a
        ROLL YAML refused by two engine limits names both)."""
        check_model_types(self)
        check_roles(self)
        problems = []
        checks = (check_distill, lambda c: check_profiler(c, roles(c)), check_micro_batching, check_strategy_configs)
        for check in checks:
            try:
                check(self)
            except ConfigError as error:
                problems.extend(error.problems)
        if problems:
            raise ConfigError(problems=problems)

    # ---- the kind interface (roll/configs/base.py) -------------------------------------------------------
    @property
    def global_batch_size(self) -> int:
        """Rows per step: the student's data-parallel size × gradient_accumulation_steps × per_device batch."""
        args = self.student.training_args
        return data_parallel_size(self.student) * args.gradient_accumulation_steps * args.per_device_train_batch_size

    def run_length(self, rows: int) -> tuple[int, str]:
        """(pipeline steps, how counted): max_steps when set, else num_train_epochs × whole global batches per
        epoch (ROLL's drop_last; the data-parallel size included, which ROLL leaves out)."""
        per_epoch = rows // self.global_batch_size
        if self.max_steps is not None:
            return self.max_steps, f"max_steps = {self.max_steps}"
        epochs = self.student.training_args.num_train_epochs
        steps = max(1, math.ceil(epochs * per_epoch))
        return (
            steps,
            f"num_train_epochs {epochs:g} × {per_epoch} steps per epoch ({rows} rows // {self.global_batch_size})",
        )

    def longest_row(self) -> tuple[int, str]:
        return self.sequence_length, "sequence_length"

    def rows_per_step(self) -> tuple[int, str]:
        return self.global_batch_size, "the student's global batch (data-parallel size × accumulation × micro-batch)"

    def optimizer_steps(self) -> dict:
        return {"student": 1}

    def fingerprint(self) -> dict:
        out = super().fingerprint()
        out.update(global_batch_size=self.global_batch_size, sequence_length=self.sequence_length)
        return out

    def describe_plan(self) -> str:
        args, teacher_micro = self.student.training_args, self.teacher.training_args.per_device_train_batch_size
        lines = [
            "distillation batches:",
            f"  student global batch {self.global_batch_size} rows per step = data-parallel size "
            f"{data_parallel_size(self.student)} × gradient_accumulation_steps {args.gradient_accumulation_steps} × "
            f"per_device_train_batch_size {args.per_device_train_batch_size}, each row cut/padded to sequence_length "
            f"{self.sequence_length}",
            "  student optimizer steps 1 per pipeline step",
            f"  teacher forward of the same rows in micro-batches of {teacher_micro}"
            f" (teacher.training_args.per_device_train_batch_size), top-{self.logits_topk or 'V (full vocabulary)'} "
            f"at τ = {self.kd_temperature:g} × τ_t = {self.teacher_temperature:g}",
            f"  loss = {1 - self.distill_loss_weight:g}·CE + {self.distill_loss_weight:g}·{self.kd_objective}, token "
            f"means over the label tokens ({'prompt and answer' if self.distill_on_prompt else 'answer'})",
            "  run length: "
            + (
                f"max_steps {self.max_steps}"
                if self.max_steps is not None
                else f"num_train_epochs {args.num_train_epochs:g} × (training rows // {self.global_batch_size}), "
                "counted when the data is loaded"
            ),
        ]
        return "\n".join(lines)

    def describe_notes(self) -> list[str]:
        return [
            f"logits_transfer_backend {self.logits_transfer_backend!r}: the teacher's top-k tensors travel through "
            "Ray's object store (ROLL's transports move the same tensors)",
            *super().describe_notes(),
        ]

    @classmethod
    def claims_roll_example(cls, text: str) -> bool:
        return bool(_ROLL_DISTILL.search(text))

    @classmethod
    def roll_blocks(cls, data: dict) -> list:
        block = data.get("validation")
        return [("validation", "validation", block)] if isinstance(block, dict) else []

    @classmethod
    def roll_translate(cls, data: dict, problems: list, first: bool) -> None:
        """ROLL's paths of its distillation workers name this kind's workers."""
        super().roll_translate(data, problems, first)
        for role in ("student", "teacher"):
            block = data.get(role)
            if not first and isinstance(block, dict) and block.get("worker_cls") in ROLL_WORKERS:
                block["worker_cls"] = ROLL_WORKERS[block["worker_cls"]]


def check_distill(config: DistillConfig) -> None:
    """Both roles, the row length, the data files, the clipping threshold and the run length (the teacher's engine
    must serve "score", which check_roles checks: the strategies whose forward gives the model's logits)."""
    problems = []
    for name in ("student", "teacher"):
        if getattr(config, name) is None:
            problems.append((name, f"'{name}' is required: the {name} model (model_args, strategy_args)"))
    if config.sequence_length is None:
        problems.append(("sequence_length", "'sequence_length' is required: every row is cut/padded to it, e.g. 2048"))
    if problems:
        raise ConfigError(problems=problems)
    student = config.student
    if student.data_args.file_name is None:
        problems.append(("student.data_args.file_name", "'student.data_args.file_name' is required: the rows"))
    if config.validation is not None and config.validation.data_args.file_name is None:
        problems.append(("validation.data_args.file_name", "'validation.data_args.file_name' is required"))
    own = student.training_args.max_grad_norm
    if own != TrainingArgs().max_grad_norm and own != config.max_grad_norm:
        problems.append(
            (
                "student.training_args.max_grad_norm",
                f"'student.training_args.max_grad_norm' = {own} differs from the top-level 'max_grad_norm' = "
                f"{config.max_grad_norm}, which is the distillation pipeline's clipping threshold (ROLL's): set only "
                "the top-level one",
            )
        )
    if problems:
        raise ConfigError(problems=problems)
    student.training_args.max_grad_norm = config.max_grad_norm  # ≤ 0: no clipping (train_common.gradient_clip_value)
    if config.max_steps is None and student.training_args.num_train_epochs is None:
        student.training_args.num_train_epochs = 1.0  # ROLL's default: one pass over the rows
