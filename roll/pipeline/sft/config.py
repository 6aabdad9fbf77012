"""The SFT pipeline config: ROLL's `SFTConfig` keys (docs/sft.md).

One trained role, `sft_train`, fine-tuned on (system, prompt, query, response) rows rendered with a chat template;
the loss is the cross-entropy of the response tokens, averaged over every label token of the optimizer step
(roll.algorithms.sft). An optional `validation` block names held-out rows whose loss is reported as
`sft_train/val_loss`.
"""

import math
import re
from dataclasses import dataclass
from typing import Literal

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
from roll.configs.worker import WorkerConfig

SFT_WORKER = "roll.pipeline.sft.worker.SFTWorker"
ROLL_SFT_WORKER = "roll.pipeline.sft.sft_worker.SFTWorker"  # ROLL's path of the same worker
_ROLL_SFT = re.compile(r"^sft_train:", re.M)


@dataclass
class SFTDataArgs:
    file_name: str | list[str] | None = field_help(
        None,
        "data file(s) of (system, prompt, query, response) rows: .json, .jsonl, .csv or .parquet (one format per "
        "block), read with `datasets`; the columns are the top-level system_key / prompt_key / query_key / "
        "response_key",
    )
    apply_chat_template: bool = field_help(
        True,
        "rows are rendered with a chat template (always, as in ROLL's SFT pipeline; ROLL's data_args.template sets "
        "it); false is refused",
    )
    chat_template: Literal["chatml", "qwen3"] | None = field_help(
        None,
        "null = the tokenizer's own template (ROLL's native / qwen2_5); chatml = the ChatML format whatever the "
        "tokenizer has (ROLL's chatml); qwen3 = the tokenizer's template with enable_thinking. ROLL's key: "
        "data_args.template (or top-level global_template). validation rows use sft_train's template",
    )
    preprocessing_num_workers: int | None = field_help(
        None, "processes `datasets` uses to read the data files (null = one)", bounds="[1, inf)"
    )


@dataclass
class SFTWorkerConfig(WorkerConfig):
    data_args: SFTDataArgs = field_help(
        default_factory=SFTDataArgs, help="the training rows (file_name) and their chat template"
    )


@dataclass
class SFTValidationConfig:
    data_args: SFTDataArgs = field_help(
        default_factory=SFTDataArgs,
        help="held-out rows (file_name), encoded as the training rows; their token-mean loss is sft_train/val_loss",
    )


SFT_TRAIN = RoleSpec("sft_train", SFT_WORKER, "train", trained=True, lora=True, roll_model_key="pretrain")


@dataclass
class SFTConfig(PipelineConfig):
    KIND = "sft"
    ROLES = (SFT_TRAIN,)
    PIPELINE = "roll.pipeline.sft.pipeline.run_pipeline"
    DEFAULT_CONFIG = ("sft_demo", "sft_tiny")
    EPOCHS_ROLE = "sft_train"
    ROLL_DATA_BLOCKS = ("sft_train", "validation")
    DOC_SECTIONS = (("`sft_train.data_args`, `validation.data_args` (SFT)", SFTDataArgs),)

    sft_train: SFTWorkerConfig | None = field_help(None, "the model being fine-tuned (a training strategy)")
    validation: SFTValidationConfig | None = field_help(
        None, "held-out rows whose loss is reported as sft_train/val_loss every eval_steps"
    )
    sequence_length: int | None = field_help(
        None,
        "required: every row (prompt + response, chat template included) is right-padded to this many tokens; a "
        "longer row is an error naming it",
        bounds="[1, inf)",
    )
    system_key: str | None = field_help(
        None, "column of a per-row system prompt (used where non-empty); null = the template's default"
    )
    prompt_key: str = field_help("instruction", "column of the user prompt")
    query_key: str | None = field_help(None, "optional column appended to the prompt after a newline (where non-empty)")
    response_key: str = field_help("output", "column of the assistant answer (the supervised tokens)")
    eval_steps: int = field_help(
        10,
        "with a validation block: the validation loss every N steps, before training and at the last step "
        "(ROLL's SFT default 10); 0 = never",
        bounds="[0, inf)",
    )

    def validate(self) -> None:
        """The rules that join fields of several blocks, after the strict build checked each field."""
        check_model_types(self)
        check_roles(self)
        check_sft(self)
        check_profiler(self, roles(self))
        check_micro_batching(self)
        check_strategy_configs(self)  # each engine's own keys, all reported together

    # ---- the kind interface (roll/configs/base.py) -------------------------------------------------------
    @property
    def global_batch_size(self) -> int:
        """Rows per optimizer step: data-parallel size × gradient_accumulation_steps × per_device_train_batch_size
        (ROLL's global train batch)."""
        args = self.sft_train.training_args
        return data_parallel_size(self.sft_train) * args.gradient_accumulation_steps * args.per_device_train_batch_size

    @property
    def val_batch_size(self) -> int:
        """Rows per validation batch (ROLL's: data-parallel size × gradient_accumulation_steps × infer_batch_size);
        sft_train/val_loss is the mean over these batches of each one's token-mean loss."""
        worker = self.sft_train
        return data_parallel_size(worker) * worker.training_args.gradient_accumulation_steps * worker.infer_batch_size

    def run_length(self, rows: int) -> tuple[int, str]:
        """(pipeline steps, how they were counted) for a training set of `rows` rows: max_steps when set, else
        num_train_epochs × the whole global batches one pass holds (ROLL's drop_last), rounded up."""
        per_epoch = rows // self.global_batch_size
        if self.max_steps is not None:
            return self.max_steps, f"max_steps = {self.max_steps} (num_train_epochs is not used)"
        epochs = self.sft_train.training_args.num_train_epochs
        steps = max(1, math.ceil(epochs * per_epoch))
        return steps, (
            f"num_train_epochs {epochs:g} × {per_epoch} steps per epoch ({rows} rows // global batch "
            f"{self.global_batch_size})"
        )

    def longest_row(self) -> tuple[int, str]:
        return self.sequence_length, "sequence_length"

    def rows_per_step(self) -> tuple[int, str]:
        return self.global_batch_size, "the global batch (data-parallel size × accumulation × micro-batch)"

    def optimizer_steps(self) -> dict:
        return {"sft_train": 1}

    def fingerprint(self) -> dict:
        """A step is the next global batch of the data in file order: its size and the row layout."""
        out = super().fingerprint()
        out.update(global_batch_size=self.global_batch_size, sequence_length=self.sequence_length)
        return out

    def describe_plan(self) -> str:
        worker, args = self.sft_train, self.sft_train.training_args
        lines = [
            "SFT batches:",
            f"  sft_train global batch {self.global_batch_size} rows per step = data-parallel size "
            f"{data_parallel_size(worker)} × gradient_accumulation_steps {args.gradient_accumulation_steps} × "
            f"per_device_train_batch_size {args.per_device_train_batch_size}, each row padded to sequence_length "
            f"{self.sequence_length}",
            "  sft_train optimizer steps 1 per pipeline step; the loss is the token mean over the step's label tokens",
            "  run length: "
            + (
                f"max_steps {self.max_steps}"
                if self.max_steps is not None
                else f"num_train_epochs {args.num_train_epochs:g} × (training rows // {self.global_batch_size}), "
                "counted when the data is loaded"
            ),
        ]
        if self.validation is not None:
            lines.append(
                f"  validation every {self.eval_steps} steps (0 = never), in batches of {self.val_batch_size} rows "
                "(data-parallel size × gradient_accumulation_steps × infer_batch_size)"
            )
        return "\n".join(lines)

    def start_up_checks(self, tokenizer_dir: str) -> list:
        from roll.pipeline.sft.data import check_template

        return [lambda: check_template(self, tokenizer_dir)]

    @classmethod
    def claims_roll_example(cls, text: str) -> bool:
        return bool(_ROLL_SFT.search(text))

    @classmethod
    def roll_translate(cls, data: dict, problems: list, first: bool) -> None:
        """ROLL's path of its SFT worker names this kind's worker."""
        super().roll_translate(data, problems, first)
        block = data.get("sft_train")
        if not first and isinstance(block, dict) and block.get("worker_cls") == ROLL_SFT_WORKER:
            block["worker_cls"] = SFT_WORKER


def check_sft(config: SFTConfig) -> None:
    """The data blocks, the row length and the run length."""
    worker = config.sft_train
    if worker is None:
        raise ConfigError("'sft_train' is required: the model to fine-tune (model_args, strategy_args, data_args)")
    if config.sequence_length is None:
        raise ConfigError(
            "'sequence_length' is required: every row (prompt + response, chat template included) is padded to it, "
            "e.g. sequence_length: 2048"
        )
    blocks = [("sft_train.data_args", worker.data_args)]
    if config.validation is not None:
        blocks.append(("validation.data_args", config.validation.data_args))
    for key, args in blocks:
        if args.file_name is None:
            raise ConfigError(f"'{key}.file_name' is required: the {'training' if key[0] == 's' else 'held-out'} rows")
        if not args.apply_chat_template:
            raise ConfigError(
                f"'{key}.apply_chat_template' = false: the SFT pipeline renders every row with a chat template "
                "(ROLL's as well); choose one with data_args.template (native, qwen2_5, chatml, qwen3)"
            )
    if config.validation is not None:
        mine, theirs = worker.data_args.chat_template, config.validation.data_args.chat_template
        if mine != theirs:
            raise ConfigError(
                f"'validation.data_args.chat_template' = {theirs!r} differs from 'sft_train.data_args.chat_template' "
                f"= {mine!r}: the validation rows are encoded with sft_train's template (as in ROLL); set them equal "
                "or remove validation's"
            )
    args = worker.training_args
    if config.max_steps is None and args.num_train_epochs is None:
        args.num_train_epochs = 1.0  # ROLL's default: one pass over the training rows
