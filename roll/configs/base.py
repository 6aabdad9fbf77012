"""Settings every pipeline (RLVR, agentic) shares: run bookkeeping, devices, logging, checkpoints."""

from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Literal

from roll.configs.loader import ConfigError, field_help
from roll.configs.profiler import ProfilerConfig

SUMMARY_WRITER_KEYS = ("log_dir", "comment", "purge_step", "max_queue", "flush_secs", "filename_suffix")


@dataclass
class RolloutMockConfig:
    enable: bool = field_help(False, "turn ROLL's rollout dump / replay on")
    mode: Literal["dump", "mock"] = field_help(
        "dump",
        "dump: store each step's rollout (the scored batch, as training receives it) and each validation's; "
        "mock: replay them instead of generating, so two runs train on identical samples (precision alignment "
        "of engines or strategies); a step missing from the dump is an error",
    )
    dump_dir: str = field_help(
        "./rollout_mock_dumps", "where the pickles go: <dump_dir>/train|val/step_<NNNNNN>.pkl (0-based step)"
    )


@dataclass
class PipelineConfig:
    exp_name: str = field_help(
        "roll",
        "experiment name: the run's TensorBoard directory is <logging_dir>/<exp_name> (runs with different "
        "names compare side by side under one logging_dir); logged at start-up",
    )
    seed: int = field_help(
        42,
        "seed for data order, sampling and initialisation; every Ray worker seeds its RNGs from it and its rank "
        "(roll.utils.seeding.worker_seed)",
        bounds="[0, inf)",
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
    model_update_buffer_size_mb: float = field_help(
        1024.0,
        "weight sync actor_train → actor_infer in buckets of at most this many MB (a larger single tensor "
        "goes alone): the sync needs about one bucket of extra memory, not a second copy of the model",
        bounds="(0, inf)",
    )
    weight_sync_method: Literal["auto", "object_store", "collective", "ipc"] = field_help(
        "auto",
        "how the buckets travel: ipc (shared memory; colocated roles), collective (a gloo/NCCL broadcast "
        "group; separate devices), object_store (Ray; anything). auto: ipc when every actor_infer worker "
        "shares a device with an actor_train worker, collective when none does, else object_store",
    )
    weight_sync_check: Literal["checksum", "full", "off"] = field_help(
        "checksum",
        "verification of each step's weight sync: checksum (what actor_train sent, in the dtype it sent, against "
        "what actor_infer serves; ~0.1-0.3% of a step at 0.36B on a GPU, estimated), full (checksums + a probe "
        "generated and scored by both roles; ~20% of that step, measured) or off. The sync at start-up, after a "
        "resume and after a recovery is always checked in full (docs/strategies.md, Verification)",
    )
    weight_sync_full_check_steps: int = field_help(
        0,
        "also check the sync in full after every N-th step (N steps trained); 0 = only at start-up, resume "
        "and recovery",
        bounds="[0, inf)",
    )
    rollout_mock: RolloutMockConfig | None = field_help(
        None, "ROLL's rollout dump / replay for precision-alignment tests (docs/reliability.md, Rollout dump)"
    )
    rollout_dump_dir: str | None = field_help(
        None,
        "ROLL's rollout log: each training step's samples as one JSON line of columns (prompt, responses, scores, "
        "tag, ..., global_step) in <dir>/rollout_dump_data.step_<N>.jsonl (N 0-based); null = off",
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
    lora_weight_sync: Literal["merged", "adapter"] = field_help(
        "merged",
        "with a LoRA actor_train: merged (the base weights with the adapters merged in, for any rollout "
        "engine) or adapter (only the adapter matrices, served by vLLM's LoRA support: actor_infer vllm "
        "with strategy_config enable_lora: true and max_lora_rank ≥ lora_rank)",
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
        if self.weight_sync_full_check_steps and self.weight_sync_check == "full":
            raise ConfigError(
                f"'weight_sync_full_check_steps' = {self.weight_sync_full_check_steps} has no effect with "
                f"weight_sync_check: full (every sync is checked in full): set it to 0 or weight_sync_check to "
                f"checksum or off"
            )

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
