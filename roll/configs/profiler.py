"""The `profiler` blocks: one at pipeline level (`profiler:`) and an optional one per role
(`actor_train.profiler:` ...), in the vocabulary of verl's profiler configuration. A role's unset keys take
the pipeline's values; docs/profiling.md says what each tool writes."""

import shutil
from dataclasses import dataclass
from typing import Literal

from roll.configs.loader import ConfigError, field_help

Tool = Literal["torch", "torch_memory", "nsys"]


@dataclass
class ProfilerConfig:
    tool: Tool | None = field_help(
        None,
        "null = no profiling. torch: a Chrome/TensorBoard trace per role, rank and profiled step, with each "
        "worker call (generate, compute_log_probs, train_step, ...) as a named range; torch_memory: the same "
        "trace with memory events plus a memory timeline (CPU) or a CUDA memory snapshot (GPU); nsys: Nsight "
        "Systems capture ranges around the profiled steps (refused where nsys is not installed)",
    )
    steps: list[int] = field_help(
        default_factory=list,
        help="1-based pipeline steps to profile (as in the progress line), e.g. [1, 2]",
        bounds="[1, inf)",
    )
    ranks: list[int] = field_help(
        default_factory=lambda: [0], help="ranks of each profiled role to profile", bounds="[0, inf)"
    )
    all_ranks: bool = field_help(False, "profile every rank (ignores ranks)")
    save_path: str | None = field_help(
        None, "directory of the traces: <save_path>/<role>/step-<N>/rank<r>.*; null = <output_dir>/profile"
    )


@dataclass
class RoleProfilerConfig:
    enable: bool = field_help(True, "false: never profile this role, whatever the pipeline's profiler says")
    tool: Tool | None = field_help(None, "null = the pipeline's profiler.tool")
    steps: list[int] | None = field_help(None, "null = the pipeline's profiler.steps", bounds="[1, inf)")
    ranks: list[int] | None = field_help(None, "null = the pipeline's profiler.ranks", bounds="[0, inf)")
    all_ranks: bool | None = field_help(None, "null = the pipeline's profiler.all_ranks")
    save_path: str | None = field_help(None, "null = the pipeline's profiler.save_path")


def role_profile(pipeline: ProfilerConfig, role: RoleProfilerConfig | None, output_dir: str) -> dict | None:
    """A role's effective settings ({tool, steps, ranks, all_ranks, save_path}), or None when it is not profiled."""
    role = role or RoleProfilerConfig()
    if not role.enable:
        return None
    settings = {
        key: getattr(role, key) if getattr(role, key) is not None else getattr(pipeline, key)
        for key in ("tool", "steps", "ranks", "all_ranks", "save_path")
    }
    if settings["tool"] is None:
        return None
    settings["save_path"] = settings["save_path"] or f"{output_dir.rstrip('/')}/profile"
    return settings


def check_profiler(config, roles: dict) -> None:
    """Every profiled role (`roles`: name → WorkerConfig) names steps within max_steps and a tool this machine
    has; run by the config loaders, so --dry_run refuses a bad block before anything starts."""
    for name, worker in roles.items():
        settings = role_profile(config.profiler, worker.profiler, config.output_dir)
        if settings is None:
            continue
        key = f"{name}.profiler" if worker.profiler is not None and worker.profiler.tool else "profiler"
        if not settings["steps"]:
            raise ConfigError(
                f"'{key}.tool' = {settings['tool']!r} profiles role {name}, but no steps are given: set "
                f"profiler.steps (or {name}.profiler.steps) to the 1-based steps to profile, e.g. [1, 2]"
            )
        last = config.max_steps or float("inf")  # null: set from num_train_epochs once the prompts are loaded
        bad = [s for s in settings["steps"] if not 1 <= s <= last]
        if bad:
            raise ConfigError(
                f"'{name}' profiler steps {bad}: steps are 1-based and must lie in 1..max_steps={config.max_steps}"
            )
        if settings["tool"] == "nsys" and shutil.which("nsys") is None:
            raise ConfigError(
                f"'{key}.tool' = 'nsys' (role {name}): Nsight Systems is not installed on this machine (no `nsys` on "
                f"PATH), so nothing could record the capture; install NVIDIA Nsight Systems on every node, or use "
                f"tool: torch (traces) or torch_memory (memory)"
            )
