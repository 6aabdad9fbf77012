"""The DPO pipeline config: ROLL's `DPOConfig` keys (docs/dpo.md).

Two model roles, as in ROLL: `actor_train` (the policy, trained) and `reference` (the frozen model its log-probs
are compared with). A step takes the next global batch of (prompt, chosen, rejected) pairs, scores both answers
with the reference, then runs one optimizer step of the DPO loss (roll.algorithms.dpo) on actor_train.
Batch sizes count PAIRS, as in ROLL's YAMLs: per_device_train_batch_size, infer_batch_size of both roles; the
engines see twice as many rows (a chosen and a rejected row per pair).
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
from roll.utils.logging import get_logger

logger = get_logger("roll.config")

DPO_WORKER = "roll.pipeline.dpo.worker.DPOWorker"
ROLL_DPO_WORKER = "roll.pipeline.dpo.actor_worker.ActorWorker"  # ROLL's path of the same worker
_ROLL_DPO = re.compile(r"^(chosen_key|rejected_key|ipo|label_smoothing):", re.M)
# ROLL's run-level offload switches: roll offloads colocated roles between phases itself (PhaseMemory)
ROLL_OFFLOAD_KEYS = ("is_offload_states", "is_offload_optimizer_states_in_train_step")


@dataclass
class DPODataArgs:
    file_name: str | list[str] | None = field_help(
        None,
        "data file(s) of (prompt, chosen, rejected) rows: .json, .jsonl, .csv or .parquet (one format per block), "
        "read with `datasets`; the columns are the top-level prompt_key / chosen_key / rejected_key",
    )
    apply_chat_template: bool = field_help(
        True, "pairs are always rendered with a chat template (as in ROLL's DPO pipeline); false is refused"
    )
    chat_template: Literal["chatml", "qwen3"] | None = field_help(
        None,
        "null = the tokenizer's own template (ROLL's native / qwen2_5); chatml = the ChatML format whatever the "
        "tokenizer has; qwen3 = the tokenizer's template with enable_thinking. ROLL's key: data_args.template (or "
        "top-level global_template). validation pairs use actor_train's template",
    )
    preprocessing_num_workers: int | None = field_help(
        None, "processes `datasets` uses to read the data files (null = one)", bounds="[1, inf)"
    )


@dataclass
class DPOWorkerConfig(WorkerConfig):
    data_args: DPODataArgs = field_help(default_factory=DPODataArgs, help="the training pairs and their chat template")


@dataclass
class DPOValidationConfig:
    data_args: DPODataArgs = field_help(
        default_factory=DPODataArgs,
        help="held-out pairs (file_name), encoded as the training pairs; their DPO metrics are val/actor/*",
    )


ACTOR_TRAIN = RoleSpec("actor_train", DPO_WORKER, "train", trained=True, lora=True, roll_model_key="pretrain")
REFERENCE = RoleSpec("reference", DPO_WORKER, "score", roll_model_key="pretrain")


@dataclass
class DPOConfig(PipelineConfig):
    KIND = "dpo"
    ROLES = (ACTOR_TRAIN, REFERENCE)
    PIPELINE = "roll.pipeline.dpo.pipeline.run_pipeline"
    DEFAULT_CONFIG = ("dpo_demo", "dpo_tiny")
    EPOCHS_ROLE = "actor_train"
    ROLL_DATA_BLOCKS = ("actor_train", "validation")
    DOC_SECTIONS = (("`actor_train.data_args`, `validation.data_args` (DPO)", DPODataArgs),)

    actor_train: DPOWorkerConfig | None = field_help(None, "the policy being trained (a training strategy)")
    reference: WorkerConfig | None = field_help(
        None, "the frozen reference model: log-probs of every chosen and rejected answer (a scoring strategy)"
    )
    validation: DPOValidationConfig | None = field_help(
        None, "held-out pairs whose DPO metrics (val/actor/loss, acc, rewards, margins) are reported every eval_steps"
    )
    sequence_length: int | None = field_help(
        None,
        "required: every chosen and rejected sequence (prompt + answer, chat template included) is right padded to "
        "this many tokens; pairs with a longer one are dropped (as in ROLL), their count logged",
        bounds="[1, inf)",
    )
    ipo: bool = field_help(
        False, "IPO loss (h − 1/(2β))² instead of the sigmoid DPO loss (ROLL declares it but never uses it)"
    )
    beta: float = field_help(
        0.1, "β: the DPO temperature, and the scale of the implicit rewards β·(π − ref)", bounds="(0, inf)"
    )
    label_smoothing: float = field_help(
        0.0,
        "cDPO's ε: the share of preference labels assumed flipped, −(1−ε)·log σ(βh) − ε·log σ(−βh) (sigmoid loss only)",
        bounds="[0, 1]",
    )
    prompt_key: str = field_help("instruction", 'column of the user prompt (ROLL: always "instruction")')
    chosen_key: str = field_help("chosen", "column of the preferred answer")
    rejected_key: str = field_help("rejected", "column of the dispreferred answer")
    eval_steps: int = field_help(
        10,
        "with a validation block: the validation metrics every N steps, before training and at the last step "
        "(ROLL's default 10); 0 = never",
        bounds="[0, inf)",
    )

    def validate(self) -> None:
        """The rules that join fields of several blocks, after the strict build checked each field."""
        check_dpo(self)
        check_model_types(self)
        check_roles(self)
        check_profiler(self, roles(self))
        check_micro_batching(self)
        check_strategy_configs(self)  # each engine's own keys, all reported together

    # ---- the kind interface (roll/configs/base.py) -------------------------------------------------------
    @property
    def global_pairs(self) -> int:
        """Pairs per optimizer step: data-parallel size × gradient_accumulation_steps × per_device_train_batch_size
        (ROLL's global train batch, in pairs)."""
        args = self.actor_train.training_args
        per_rank = args.gradient_accumulation_steps * args.per_device_train_batch_size
        return data_parallel_size(self.actor_train) * per_rank

    @property
    def val_pairs(self) -> int:
        """Pairs per validation batch (ROLL's: data-parallel size × gradient_accumulation_steps × infer_batch_size)."""
        worker = self.actor_train
        return data_parallel_size(worker) * worker.training_args.gradient_accumulation_steps * worker.infer_batch_size

    def run_length(self, pairs: int) -> tuple[int, str]:
        """(pipeline steps, how counted) for `pairs` training pairs: ROLL's loop runs int(num_train_epochs) passes of
        whole global batches (drop_last) and stops at max_steps; here floor(num_train_epochs × steps per epoch),
        capped by max_steps. Only max_steps set: max_steps (the data is passed over again as needed)."""
        per_epoch = pairs // self.global_pairs
        epochs = self.actor_train.training_args.num_train_epochs
        how = f"{pairs} pairs // global batch {self.global_pairs} = {per_epoch} steps per epoch"
        if epochs is None:
            if self.max_steps is not None:
                return self.max_steps, f"max_steps = {self.max_steps}"
            epochs = 1.0
        steps = max(1, math.floor(epochs * per_epoch))
        if self.max_steps is not None and self.max_steps < steps:
            return self.max_steps, f"max_steps = {self.max_steps} (< num_train_epochs {epochs:g} × {how})"
        return steps, f"num_train_epochs {epochs:g} × {how}"

    def longest_row(self) -> tuple[int, str]:
        return self.sequence_length, "sequence_length"

    def rows_per_step(self) -> tuple[int, str]:
        return 2 * self.global_pairs, "2 × the global batch of pairs (a chosen and a rejected row each)"

    def optimizer_steps(self) -> dict:
        return {"actor_train": 1}

    def fingerprint(self) -> dict:
        """A step is the next global batch of the seeded pair order: its size and the row layout."""
        out = super().fingerprint()
        out.update(global_pairs=self.global_pairs, sequence_length=self.sequence_length)
        return out

    def describe_plan(self) -> str:
        worker, args = self.actor_train, self.actor_train.training_args
        loss = "IPO" if self.ipo else ("cDPO" if self.label_smoothing else "DPO (sigmoid)")
        lines = [
            "DPO batches:",
            f"  actor_train global batch {self.global_pairs} pairs ({2 * self.global_pairs} rows) per step = "
            f"data-parallel size {data_parallel_size(worker)} × gradient_accumulation_steps "
            f"{args.gradient_accumulation_steps} × per_device_train_batch_size {args.per_device_train_batch_size} "
            f"pairs, every row padded to sequence_length {self.sequence_length}",
            f"  loss {loss}: beta {self.beta:g}, label_smoothing {self.label_smoothing:g}, ipo {self.ipo}; the mean "
            "over the step's pairs; actor_train optimizer steps 1 per pipeline step",
            f"  reference scores {2 * self.reference.infer_batch_size} rows ({self.reference.infer_batch_size} pairs) "
            "per forward"
            if self.reference is not None
            else "  reference: none",
            "  run length: "
            + (
                f"max_steps {self.max_steps}"
                if args.num_train_epochs is None and self.max_steps is not None
                else f"num_train_epochs {args.num_train_epochs or 1:g} × (training pairs // {self.global_pairs})"
                + (f", at most max_steps {self.max_steps}" if self.max_steps is not None else "")
                + ", counted when the data is loaded"
            ),
        ]
        if self.validation is not None:
            lines.append(
                f"  validation every {self.eval_steps} steps (0 = never) over every held-out pair, scored in batches "
                f"of {self.val_pairs} pairs (data-parallel size × gradient_accumulation_steps × infer_batch_size)"
            )
        return "\n".join(lines)

    def start_up_checks(self, tokenizer_dir: str) -> list:
        from roll.pipeline.dpo.data import check_template

        return [lambda: check_template(self, tokenizer_dir)]

    @classmethod
    def claims_roll_example(cls, text: str) -> bool:
        return bool(_ROLL_DPO.search(text)) and "actor_infer:" not in text

    @classmethod
    def roll_translate(cls, data: dict, problems: list, first: bool) -> None:
        """ROLL's path of its DPO worker names this kind's worker; ROLL's offload switches are noted; a
        data_args.dataset_dir is dropped: ROLL's DPO pipeline reads file_name as given (the shared alias would
        join the two, which ROLL's RLVR loader does)."""
        super().roll_translate(data, problems, first)
        if first:
            for block in ("actor_train", "validation"):
                args = data.get(block, {}).get("data_args") if isinstance(data.get(block), dict) else None
                if isinstance(args, dict) and "dataset_dir" in args:
                    logger.warning(
                        "'%s.data_args.dataset_dir' = %r is ignored: ROLL's DPO pipeline reads file_name as given, "
                        "so ROLL ignores it too", block, args.pop("dataset_dir"),
                    )  # fmt: skip
            for key in ROLL_OFFLOAD_KEYS:
                if key in data:
                    value = data.pop(key)
                    if not isinstance(value, bool):
                        problems.append((key, f"'{key}' = {value!r}: expected true or false (ROLL's type)"))
                    else:
                        data.setdefault("__roll__", {}).setdefault("offload", {})[key] = value
            for role in ("actor_train", "reference"):
                block = data.get(role)
                if isinstance(block, dict) and block.get("worker_cls") in (ROLL_DPO_WORKER, DPO_WORKER):
                    # the role's default (its RoleSpec); removed before the shared alias of actor_train.worker_cls,
                    # which takes every other roll.pipeline.* path for one of ROLL's RL workers
                    del block["worker_cls"]

    @classmethod
    def roll_blocks(cls, data: dict) -> list:
        block = data.get("validation")
        return [("validation", "validation", block)] if isinstance(block, dict) else []

    def note_roll_keys(self, extra: dict) -> None:
        self._roll_offload = extra.get("offload", {})

    def describe_notes(self) -> list[str]:
        return [
            f"{key}: {value} (ROLL's offload switch) has no effect here: roll offloads colocated roles between "
            "phases by itself (docs/dpo.md)"
            for key, value in getattr(self, "_roll_offload", {}).items()
        ]


def check_dpo(config: DPOConfig) -> None:
    """The roles, the data blocks, the row length and what a pair needs of the batching."""
    if config.actor_train is None:
        raise ConfigError("'actor_train' is required: the policy to train (model_args, strategy_args, data_args)")
    if config.reference is None:
        raise ConfigError(
            "'reference' is required: the frozen model the DPO loss compares the policy with (model_args, "
            "strategy_args: e.g. hf_infer); ROLL's DPO pipeline has one too"
        )
    if config.sequence_length is None:
        raise ConfigError(
            "'sequence_length' is required: every chosen and rejected sequence is padded to it, e.g. "
            "sequence_length: 512"
        )
    if config.ipo and config.label_smoothing:
        raise ConfigError(
            f"'label_smoothing' = {config.label_smoothing} applies to the sigmoid (c)DPO loss only; with ipo: true "
            "set label_smoothing: 0"
        )
    blocks = [("actor_train.data_args", config.actor_train.data_args)]
    if config.validation is not None:
        blocks.append(("validation.data_args", config.validation.data_args))
    for key, args in blocks:
        if args.file_name is None:
            raise ConfigError(f"'{key}.file_name' is required: the {'training' if key[0] == 'a' else 'held-out'} pairs")
        if not args.apply_chat_template:
            raise ConfigError(
                f"'{key}.apply_chat_template' = false: the DPO pipeline renders every pair with a chat template "
                "(ROLL's as well); choose one with data_args.chat_template (ROLL: global_template)"
            )
    if config.validation is not None:
        mine, theirs = config.actor_train.data_args.chat_template, config.validation.data_args.chat_template
        if mine != theirs:
            raise ConfigError(
                f"'validation.data_args.chat_template' = {theirs!r} differs from 'actor_train.data_args.chat_template'"
                f" = {mine!r}: the validation pairs are encoded with actor_train's template (as in ROLL); set them "
                "equal or remove validation's"
            )
    for name, worker in roles(config).items():
        if worker.use_sequence_packing:
            raise ConfigError(
                f"'{name}.use_sequence_packing': the DPO pipeline pads every chosen and rejected row to "
                "sequence_length (ROLL's DPO pipeline refuses packing too); set it to false"
            )
    if config.actor_train.use_dynamic_batching_in_train:
        raise ConfigError(
            "'actor_train.use_dynamic_batching_in_train': token-budget micro-batches could split a chosen/rejected "
            "pair, and the DPO loss needs both rows of a pair in one micro-batch; set it to false"
        )
    for name, worker in roles(config).items():
        if name != "actor_train" and worker.training_args.num_train_epochs is not None:
            raise ConfigError(f"'{name}.training_args.num_train_epochs': only actor_train's sets the run length")
