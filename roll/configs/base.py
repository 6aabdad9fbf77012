"""Settings every pipeline kind shares (run bookkeeping, devices, logging, checkpoints) and the interface of a
kind's config class: what the launcher, the loader, the shared config checks, `--dry_run`, the pipeline and its
checkpoints ask a kind instead of testing which kind it is.

A kind's config class (e.g. roll/pipeline/rlvr/config.py) subclasses `PipelineConfig` and declares:
    KIND            its name in the table of kinds
    ROLES           its model roles, one `RoleSpec` each (roll/configs/roles.py): default worker class, strategy
                    capability, trained / checkpointed, LoRA, ROLL's model-path key
    PIPELINE        the dotted path of its `run_pipeline(config) -> history`
    DEFAULT_CONFIG  (config_path relative to examples/, config_name) of its launcher's embedded default
and implements `validate()`, `optimizer_steps()`, `describe_plan()` (and, where it has more, the other hooks
below). The table of kinds is roll/pipeline/kinds.py; docs/architecture.md ("How to add a pipeline kind").
"""

import dataclasses
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, ClassVar, Literal

from roll.configs.loader import ConfigError, field_help
from roll.configs.profiler import ProfilerConfig
from roll.configs.roles import RoleSpec

SUMMARY_WRITER_KEYS = ("log_dir", "comment", "purge_step", "max_queue", "flush_secs", "filename_suffix")


@dataclass
class PipelineConfig:
    # ---- the kind (class attributes; see the module docstring) ---------------------------------------------
    KIND: ClassVar[str] = ""  # its name in the table of kinds (roll/pipeline/kinds.py)
    ROLES: ClassVar[tuple[RoleSpec, ...]] = ()
    PIPELINE: ClassVar[str] = ""
    DEFAULT_CONFIG: ClassVar[tuple[str, str]] = ("", "")
    # the loader: `<key>.<name>: null` drops an inherited entry of these maps; the entries of NAMED_ROLE_MAPS are
    # named roles (their `name` is set from the key)
    DROPPABLE_MAPS: ClassVar[tuple[str, ...]] = ()
    NAMED_ROLE_MAPS: ClassVar[tuple[str, ...]] = ()
    # the role whose training_args.num_train_epochs sets the run length (over the kind's dataset); None: no
    # dataset to count epochs over
    EPOCHS_ROLE: ClassVar[str | None] = None
    # ROLL's top-level blocks besides the roles that take ROLL's `rpc_timeout` (e.g. the env managers)
    ROLL_TIMEOUT_BLOCKS: ClassVar[tuple[str, ...]] = ()
    # the blocks whose data_args take ROLL's top-level `global_template`
    ROLL_DATA_BLOCKS: ClassVar[tuple[str, ...]] = ()
    # docs/configuration.md (scripts/config_reference.py): (title, dataclass) of each block of the kind's own
    DOC_SECTIONS: ClassVar[tuple[tuple[str, type], ...]] = ()

    exp_name: str = field_help(
        "roll",
        "experiment name: the run's TensorBoard directory is <logging_dir>/<exp_name> (runs with different "
        "names compare side by side under one logging_dir); logged at start-up",
    )
    seed: int = field_help(
        42,
        "seed for data order, sampling and initialisation; every Ray worker seeds its RNGs from it and its rank "
        "(roll.utils.seeding.worker_seed); numpy's range, which np.random.seed takes",
        bounds="[0, 4294967295]",
    )
    output_dir: str = field_help(
        "./output", "samples, learning curves and (without checkpoint_dir) checkpoints: <output_dir>/checkpoints/step-N"
    )
    checkpoint_dir: str | None = field_help(
        None,
        "checkpoints go to <checkpoint_dir>/checkpoints/step-N (ROLL's checkpoint_config.output_dir); null = "
        "output_dir. Every node must see it (a shared filesystem)",
    )
    logging_dir: str | None = field_help(
        None,
        "the metric sink's root directory (runs go to <logging_dir>/<exp_name>); null means "
        "<output_dir>/tensorboard, or <output_dir>/wandb / <output_dir>/swanlab with track_with wandb / swanlab",
    )
    track_with: Literal["tensorboard", "wandb", "swanlab", "stdout"] = field_help(
        "tensorboard",
        "metric sink besides the console progress line; wandb and swanlab run offline (files under "
        "<logging_dir>/<exp_name>) unless tracker_kwargs sets their mode",
    )
    tracker_kwargs: dict[str, Any] = field_help(
        default_factory=dict,
        help="extra arguments of wandb.init / swanlab.init (project, mode, tags, ...), passed unchanged; with "
        "tensorboard, SummaryWriter's: log_dir (ROLL's key: the events go there instead of "
        "<logging_dir>/<exp_name>), comment, purge_step, max_queue, flush_secs, filename_suffix",
    )
    num_nodes: int | None = field_help(
        None,
        "machines in the Ray cluster; null = as many as the largest device id needs (ROLL derives it the same way: "
        "ceil((max device id + 1) / num_gpus_per_node))",
        bounds="[1, inf)",
    )
    num_gpus_per_node: int = field_help(
        1,
        "devices per machine; on a CPU-only machine these are virtual devices (one Ray resource each)",
        bounds="[1, inf)",
    )
    placement_timeout: float = field_help(
        120.0,
        "seconds to wait for Ray to reserve every device of num_nodes × num_gpus_per_node before failing",
        bounds="(0, inf)",
    )
    max_steps: int | None = field_help(
        None,
        "pipeline steps (rollout + update) to run; null = from actor_train.training_args.num_train_epochs "
        "(RLVR, once the prompts are loaded), else 1",
        bounds="[1, inf)",
    )
    save_steps: int = field_help(0, "checkpoint every N steps and at the last step; 0 = never", bounds="[0, inf)")
    max_ckpt_to_keep: int = field_help(
        0,
        "keep only the newest N checkpoints (older ones are removed after a new one is complete); 0 = keep all",
        bounds="[0, inf)",
    )
    max_failures: int = field_help(
        0,
        "automatic recoveries per run: when a role's worker dies or a call times out, tear the roles down, restart "
        "them, reload the last complete checkpoint and redo the steps since, at most this many times (each is "
        "logged and counted in system/recoveries); 0 = the run stops at the first failure",
        bounds="[0, inf)",
    )
    checkpoint_on_stop: bool = field_help(
        True,
        "on SIGTERM or Ctrl-C the run finishes its step and writes a checkpoint of it before it stops (a second "
        "signal stops at once); false stops after the step without writing one (the newest earlier checkpoint is "
        "the one to resume; docs/reliability.md)",
    )
    eval_steps: int = field_help(
        0, "validate every N steps, before training and at the last step; 0 = never", bounds="[0, inf)"
    )
    logging_steps: int = field_help(1, "print the progress line every N steps", bounds="[1, inf)")
    sample_log_steps: int = field_help(
        0,
        "write every N-th step's samples (prompt, response, score) to <output_dir>/samples/step-N.jsonl and every "
        "validation's to <output_dir>/samples/validation/step-N.jsonl (N = steps trained, 0 = before); 0 = off",
        bounds="[0, inf)",
    )
    resume_from_checkpoint: bool | str = field_help(
        False,
        "true: continue from the newest checkpoint in checkpoint_dir / output_dir (fresh start if none); "
        "a path: continue from that step directory",
    )
    overwrite_output_dir: bool = field_help(
        False,
        "a fresh run (resume_from_checkpoint: false) into a checkpoint directory holding an earlier run's "
        "checkpoints: false refuses to start; true deletes them first (HF TrainingArguments' key; "
        "docs/reliability.md)",
    )
    system_envs: dict[str, str] = field_help(
        default_factory=dict, help="environment variables set in every Ray worker (see roll/configs/blocks/envs.yaml)"
    )
    model_download_type: Literal["HUGGINGFACE_HUB", "MODELSCOPE"] | None = field_help(
        None,
        "where a model_name_or_path that is not a local directory comes from (ROLL's key): null / HUGGINGFACE_HUB = "
        "the Hugging Face Hub (transformers downloads it); MODELSCOPE is accepted for local directories only: a "
        "path that would need a ModelScope download fails at start-up with a message (download it first)",
    )
    profiler: ProfilerConfig = field_help(
        default_factory=ProfilerConfig,
        help="profiling of the roles' workers (tool, steps, ranks, save_path); a role's own `profiler` block "
        "overrides it key by key (docs/profiling.md)",
    )

    def __post_init__(self):
        name = PurePath(self.exp_name)
        if not self.exp_name or name.is_absolute() or ".." in name.parts:
            raise ConfigError(
                f"'exp_name' = {self.exp_name!r}: must be a non-empty relative name (it becomes the run's "
                f"directory under logging_dir), e.g. tiny_rlvr"
            )
        if self.track_with in TRACKER_PACKAGES:
            _check_tracker_installed(self.track_with)
        if self.tracker_kwargs and self.track_with == "stdout":
            raise ConfigError("'tracker_kwargs' is set but track_with = 'stdout' reads none: remove tracker_kwargs")
        unknown = sorted(set(self.tracker_kwargs) - set(SUMMARY_WRITER_KEYS))
        if self.track_with == "tensorboard" and unknown:
            raise ConfigError(
                f"'tracker_kwargs' has {unknown}, which TensorBoard's SummaryWriter does not take; valid: "
                f"{list(SUMMARY_WRITER_KEYS)}"
            )

    def validate(self) -> None:
        """The kind's cross-field rules, after the strict build checked each field (ConfigError naming the keys)."""
        raise NotImplementedError(f"{type(self).__name__}.validate")

    # ---- roles -----------------------------------------------------------------------------------------------
    @classmethod
    def role_specs(cls) -> dict[str, RoleSpec]:
        return {spec.name: spec for spec in cls.ROLES}

    def roles(self) -> dict:
        """name → WorkerConfig of every configured role: the model roles in ROLES order, then the config's own
        model roles (`extra_model_roles()`), then `extra_roles()`."""
        out = {spec.name: getattr(self, spec.name) for spec in self.ROLES if getattr(self, spec.name) is not None}
        out.update({name: worker for name, (_, worker) in self.extra_model_roles().items()})
        out.update(self.extra_roles())
        return out

    def extra_model_roles(self) -> dict:
        """Model roles whose names come from the YAML rather than from ROLES (e.g. on-policy distillation's
        teachers, `teacher.<name>`): name → (RoleSpec, WorkerConfig). They are checked, placed, started and
        colocated like the ROLES; none is trained."""
        return {}

    def model_role_specs(self) -> dict[str, RoleSpec]:
        """name → RoleSpec of every model role of this config: the ROLES, then `extra_model_roles()`."""
        return {**self.role_specs(), **{name: spec for name, (spec, _) in self.extra_model_roles().items()}}

    def extra_roles(self) -> dict:
        """Roles outside ROLES (no model the pipeline trains or colocates, e.g. RLVR's reward scorers): name →
        WorkerConfig; their worker_cls is required."""
        return {}

    def trained_roles(self) -> list[str]:
        """The configured roles that run optimizer steps (their engine state is checkpointed), in ROLES order."""
        return [spec.name for spec in self.ROLES if spec.trained and getattr(self, spec.name) is not None]

    def tokenizer_role(self) -> str:
        """The role whose model directory gives the pipeline's tokenizer: the first configured role of ROLES."""
        return next(spec.name for spec in self.ROLES if getattr(self, spec.name) is not None)

    def longest_row(self) -> tuple[int, str]:
        """(the most tokens one row can have, how that is computed) for token budgets of micro-batches."""
        raise NotImplementedError(f"{type(self).__name__}.longest_row")

    def rows_per_step(self) -> tuple[int, str] | None:
        """(rows one pipeline step holds at once, how they are counted, naming the keys) for the start-up memory
        check (roll.configs.sizes); None: the kind does not estimate it."""
        return None

    def start_up_checks(self, tokenizer_dir: str) -> list:
        """The kind's own start-up checks, run by roll.pipeline.core.preflight (and `--dry_run`) once the tokenizer's
        model directory is readable: zero-argument callables that raise a UserError naming the key."""
        return []

    # ---- what the kind computes per step -----------------------------------------------------------------------
    def optimizer_steps(self) -> dict:
        """Trained role → optimizer steps per pipeline step (LR schedules; `--dry_run` prints them)."""
        raise NotImplementedError(f"{type(self).__name__}.optimizer_steps")

    def fingerprint(self) -> dict:
        """The settings a resumed run must share with its checkpoint (saved in pipeline_state.pt as "config"):
        the seed and the trained roles' strategy and world size (their engine state is sharded by them); a kind
        adds what changes what a step is."""
        out = {"seed": self.seed}
        for name in self.trained_roles():
            worker = getattr(self, name)
            if worker.strategy_args is not None:
                out[f"{name}.strategy_args.strategy_name"] = worker.strategy_args.strategy_name
                out[f"{name}.world_size"] = worker.world_size
        return out

    # ---- --dry_run and the start-up report ---------------------------------------------------------------------
    def describe(self) -> str:
        """The resolved config, the kind's arithmetic (`describe_plan`), the placement plan and the kind's notes."""
        from omegaconf import OmegaConf

        from roll.configs.roll_compat.lengths import length_lines
        from roll.distributed.resource_manager import format_plan, placement_plan

        parts = [
            "resolved config:",
            OmegaConf.to_yaml(self.resolved()).rstrip(),
            self.describe_plan(),
            format_plan(placement_plan(self.roles()), self.num_devices, self.num_gpus_per_node),
        ]
        parts.extend(length_lines(self))
        parts.extend(self.describe_notes())
        return "\n".join(parts)

    def resolved(self) -> dict:
        """The config as `--dry_run` prints it."""
        return dataclasses.asdict(self)

    def describe_plan(self) -> str:
        """The kind's arithmetic: what one pipeline step processes, per role."""
        raise NotImplementedError(f"{type(self).__name__}.describe_plan")

    def describe_notes(self) -> list[str]:
        """Lines after the placement plan: what the run will (not) do that the keys alone do not say."""
        return []

    # ---- the launcher ------------------------------------------------------------------------------------------
    def check_inputs(self) -> "PipelineConfig":
        """The launcher's checks of what the config names on disk (data files, tokenizer), by `--dry_run` too,
        after `validate()`; missing files are left to the pipeline's start-up checks. Returns self."""
        return self

    def run(self) -> dict:
        """Run the kind's pipeline to the end; returns its history."""
        from roll.utils.import_utils import import_class

        return import_class(self.PIPELINE)(self)

    # ---- ROLL's YAMLs (roll.configs.roll_compat) -----------------------------------------------------------------
    @classmethod
    def claims_roll_example(cls, text: str) -> bool:
        """Whether a ROLL example YAML (its text) is a config of this kind (scripts/check_roll_examples.py picks
        the loader by asking each kind, in the table's order)."""
        return False

    @classmethod
    def roll_translate(cls, data: dict, problems: list, first: bool) -> None:
        """The kind's own ROLL translations of the resolved plain dict, in place; problems as (key path,
        message). Called twice: `first` before the shared translation (e.g. moving a block the shared aliases
        then translate), then after it."""

    @classmethod
    def roll_blocks(cls, data: dict) -> list:
        """The kind's blocks besides the roles that ROLL's per-block aliases apply to: (alias block name, key
        path, the block's dict), e.g. ("validation", "validation", data["validation"])."""
        return []

    def check_roll_keys(self, extra: dict) -> list:
        """Checks of ROLL aliases that need the built config (`extra`: what the translation kept for later);
        (key path, message) problems."""
        return []

    def note_roll_keys(self, extra: dict) -> None:
        """Keep on the built config what `--dry_run` should show of the translation."""

    @property
    def num_devices(self) -> int:
        return self.num_nodes * self.num_gpus_per_node

    @property
    def tensorboard_dir(self) -> str:
        """The metric sink's root (`logging_dir`, or a directory of output_dir named after the sink: wandb's
        and swanlab's files do not belong in the TensorBoard folder)."""
        sink = self.track_with if self.track_with in TRACKER_PACKAGES else "tensorboard"
        return self.logging_dir or f"{self.output_dir.rstrip('/')}/{sink}"


TRACKER_PACKAGES = ("wandb", "swanlab")  # track_with values that need a package of their own (an extra)


def _check_tracker_installed(name: str) -> None:
    import importlib.util

    if importlib.util.find_spec(name) is None:
        raise ConfigError(
            f"'track_with' = {name!r}: the {name} package is not installed; install roll's {name} extra "
            f"(pip install -e '.[{name}]' in the checkout, or pip install '{name}'), or set track_with: tensorboard"
        )
