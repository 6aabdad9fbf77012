"""The agentic pipeline config: a policy acting over several turns in environments.

The roles and the RL maths are the RLVR ones (`roll.configs.algorithm`). What is new: the environments
(`custom_envs.<tag>`, schema and rules shared in roll/configs/agentic.py), how many of them run and how they are
grouped (`train_env_manager`, `val_env_manager`), and how episode rewards are normalised (`reward_normalization`).
Without actor_train the config is ROLL's rollout-only pipeline (episodes played and scored, nothing trained).
"""

import math
import re
from dataclasses import dataclass
from typing import Literal

from roll.configs.agentic import (
    EnvConfig,
    EnvManagerConfig,
    RewardNormalization,
    ToolConfig,
    ToolWrapperArgs,
    ToolWrapperConfig,
    check_agentic,
    group_tags,
    num_env_workers,
    rows_per_episode,
)
from roll.configs.algorithm import RLAlgorithmConfig
from roll.configs.checks import (
    check_micro_batching,
    check_model_types,
    check_roles,
    check_run_length,
    check_strategy_configs,
    data_parallel_size,
    roles,
)
from roll.configs.loader import ConfigError, field_help
from roll.configs.policy_loss import effective_policy_loss_mode
from roll.configs.profiler import check_profiler
from roll.configs.rl_checks import check_actor_roles, check_algorithm, check_lora_weight_sync
from roll.utils.logging import get_logger

logger = get_logger("roll.config")
# a ROLL example YAML of the agentic kind: its environment blocks (scripts/check_roll_examples.py)
_ROLL_AGENTIC = re.compile(r"^(custom_envs|train_env_manager|val_env_manager):|envs@_here_", re.M)


@dataclass
class AgenticConfig(RLAlgorithmConfig):
    KIND = "agentic"
    PIPELINE = "roll.pipeline.agentic.run_pipeline"
    DEFAULT_CONFIG = ("agentic_demo", "frozen_lake_traj")
    DROPPABLE_MAPS = ("custom_envs",)  # the loader: `custom_envs.<tag>: null` drops an inherited environment
    EPOCHS_ROLE = None  # no prompt dataset: the run length is max_steps
    ROLL_TIMEOUT_BLOCKS = ("train_env_manager", "val_env_manager")
    DOC_SECTIONS = (
        ("Environments: `custom_envs.<tag>`", EnvConfig),
        ("Tools: `custom_envs.<tag>.tool_wrapper` (docs/agentic_envs.md)", ToolWrapperConfig),
        ("`custom_envs.<tag>.tool_wrapper.wrapper_args`", ToolWrapperArgs),
        ("`custom_envs.<tag>.tool_wrapper.tool_configs[i]`", ToolConfig),
        ("`train_env_manager`, `val_env_manager`", EnvManagerConfig),
        ("`reward_normalization`", RewardNormalization),
    )

    custom_envs: dict[str, EnvConfig] = field_help(
        default_factory=dict,
        help="environments by tag: custom_envs.<tag> with env_type and env_config; `custom_envs.<tag>: null` "
        "drops one an included YAML defines",
    )
    train_env_manager: EnvManagerConfig = field_help(
        default_factory=EnvManagerConfig, help="the environments that produce training trajectories"
    )
    val_env_manager: EnvManagerConfig | None = field_help(
        None, "held-out environments, run every eval_steps; success rate per tag"
    )
    rollout_batch_size: int = field_help(
        8, "trajectories per pipeline step (a multiple of train_env_manager.group_size)", bounds="[1, inf)"
    )
    reward_normalization: RewardNormalization = field_help(
        default_factory=RewardNormalization, help="episode-reward normalisation before advantages"
    )
    step_reward_gamma: float = field_help(
        1.0, "step manager: discount of later turns' rewards in each turn's return", bounds="[0, 1]"
    )
    episode_reward_weight: float = field_help(
        1.0, "gigpo: weight of the episode-level (trajectory group) advantage", bounds="(-inf, inf)"
    )
    step_reward_weight: float = field_help(
        1.0, "gigpo: weight of the step-level (same state) advantage", bounds="(-inf, inf)"
    )
    ratio_type: Literal["token", "segment"] = field_help(
        "token",
        "ratio of the PPO loss (policy_loss_mode vanilla / pg_variant ppo): token = per token; segment = one "
        "ratio per turn of a multi-turn response, exp(mean of the turn's token log-ratios) (ROLL; "
        "docs/algorithms.md §11.7)",
    )
    async_generation_ratio: float = field_help(
        0.0,
        "off-policy rollout: the episodes of step t+k are played while step t trains (k = this value, a whole "
        "number; 0 = the synchronous loop), each with the weights of step max(first, t) throughout. Needs "
        "actor_infer on devices no other model role uses (docs/async.md)",
        bounds="[0, inf)",
    )
    partial_rollout: bool = field_help(
        False,
        "async_generation_ratio > 0: episodes keep running across a weight update (the sync waits only for the "
        "generate call in flight; later turns use the new weights, so an episode can mix two policy versions); "
        "false: the sync waits until the episodes started on the old weights have ended",
    )
    batch_adjust_mode: Literal["copy", "delete", "auto", "random_sample"] = field_help(
        "copy",
        "a step's rows (trajectories, or turns with the step manager) that are not a multiple of the global train "
        "batch (ROLL's key): copy = pad up with rows that carry no loss (ROLL repeats real rows instead); delete "
        "= drop the surplus rows at random; random_sample = train on one global batch of random rows; auto = "
        "delete unless that drops half the rows or more, then copy. Rows are dropped before the rewards are "
        "normalised; with fewer rows than one global batch every mode pads",
    )
    val_seed_offset: int = field_help(
        1_000_000,
        "validation episode group g uses seed val_seed_offset + g, round r's groups continue after round r−1's "
        "(the same episodes at every evaluation)",
        bounds="[0, inf)",
    )
    val_batch_size: int | None = field_help(
        None,
        "ROLL's validation trajectories per evaluation: a multiple of val_env_manager.num_env_groups × group_size; "
        "each environment plays val_batch_size / that many episodes, each round on new seeds (null = one round)",
        bounds="[1, inf)",
    )

    @property
    def rollout_only(self) -> bool:
        """No actor_train: ROLL's agentic rollout pipeline (episodes played and scored, nothing trained)."""
        return self.actor_train is None and self.actor_infer is not None

    @property
    def group(self) -> tuple[str, int]:
        return "train_env_manager.group_size", self.train_env_manager.group_size

    @property
    def episodes_per_env(self) -> int:
        return self.rollout_batch_size // self.train_env_manager.num_envs

    @property
    def val_rounds(self) -> int:
        """Validation episodes per val_env_manager environment (val_batch_size / its environments; default 1)."""
        if self.val_batch_size is None or self.val_env_manager is None:
            return 1
        return self.val_batch_size // self.val_env_manager.num_envs

    def validate(self) -> None:
        """The rules that join fields of several blocks, after the strict build checked each field (types,
        ranges, keys); the first broken rule raises ConfigError naming its keys and the fix."""
        check_run_length(self)
        check_model_types(self)
        if not self.rollout_only:
            check_actor_roles(self)
        check_roles(self)
        if self.rollout_only:
            check_rollout_only(self)
        else:
            check_lora_weight_sync(self)
            grpo_group_of_one(self)
            check_segment_ratio(self)
            check_algorithm(self)
        check_agentic(self)
        check_profiler(self, roles(self))
        check_micro_batching(self)
        check_strategy_configs(self)  # each engine's own keys, all reported together

    # ---- the kind interface (roll/configs/base.py) -------------------------------------------------------
    @property
    def ratio_level(self) -> str:
        # ROLL's agentic `ratio_type: segment` is the PPO ratio's third level
        return "segment" if self.ratio_type == "segment" else self.importance_sampling

    def rows_per_step(self) -> tuple[int, str]:
        return self.rollout_batch_size, f"rollout_batch_size {self.rollout_batch_size:,} trajectories"

    def optimizer_steps(self) -> dict:
        return agentic_optimizer_steps(self)

    def describe_plan(self) -> str:
        lines = ["environments:"]
        for key in ("train_env_manager", "val_env_manager"):
            manager = getattr(self, key)
            if manager is None:
                continue
            tags = group_tags(manager)
            per_tag = ", ".join(f"{tag} {tags.count(tag)}" for tag in manager.tags)
            lines.append(
                f"  {key:<18} {manager.num_env_groups} groups × {manager.group_size} envs = {manager.num_envs} "
                f"envs on {num_env_workers(manager)} env worker(s); groups per tag: {per_tag}"
            )
        lines.append(
            f"  trajectories per step  {self.rollout_batch_size} (= {self.episodes_per_env} episode(s) per "
            f"training env)"
        )
        for name, steps in self.optimizer_steps().items():
            lines.append(f"  {name} optimizer steps ~{steps} per pipeline step")
        train = self.train_env_manager
        for tag, env in self.custom_envs.items():
            if env.env_manager == "proxy":  # an outside agent plays: say where it finds the policy
                where = f"{train.proxy_host}:{train.proxy_port or 'a free port'}"
                lines.append(
                    f"  {tag}: each episode played by {env.agent_runner_cls} through its environment worker's "
                    f"OpenAI-compatible endpoint ({where} for training, a token per episode)"
                )
        return "\n".join(lines)

    def describe_notes(self) -> list[str]:
        if not self.rollout_only:
            return super().describe_notes()
        notes = [
            *self.loss_notes(),
            "rollout-only (no actor_train): each step plays rollout_batch_size episodes with actor_infer and logs "
            "their scores; nothing is trained and no checkpoint is saved (ROLL's agentic rollout pipeline)",
        ]
        unused = [name for name in ("reference", "critic") if getattr(self, name) is not None]
        if unused:
            notes.append(f"note: {' and '.join(unused)} configured but not started: a rollout-only run trains nothing")
        return notes

    def check_inputs(self) -> "AgenticConfig":
        """A first prompt longer than prompt_length is refused here, by --dry_run too."""
        from roll.pipeline.agentic.first_prompts import check_first_prompts_on_disk

        return check_first_prompts_on_disk(self)

    @classmethod
    def claims_roll_example(cls, text: str) -> bool:
        return bool(_ROLL_AGENTIC.search(text))

    @classmethod
    def roll_translate(cls, data: dict, problems: list, first: bool) -> None:
        """ROLL's env settings inside env_config, one level up; prompt_length / response_length from ROLL's
        sequence_length."""
        super().roll_translate(data, problems, first)
        if first:
            return
        from roll.configs.roll_compat.lengths import derive_agentic_lengths
        from roll.configs.roll_compat.translate import lift_env_settings

        for tag, env in (data.get("custom_envs") or {}).items():
            if isinstance(env, dict):
                lift_env_settings(env, f"custom_envs.{tag}", problems)
        problems.extend(derive_agentic_lengths(cls, data, data.setdefault("__roll__", {})))

    def opd_routing(self) -> tuple[str, dict[str, set]]:
        """Teachers take trajectories by environment tag (ROLL's agentic routing key `tags`)."""
        return "tag", {tag: {tag} for tag in self.train_env_manager.tags}

    @classmethod
    def roll_blocks(cls, data: dict) -> list:
        blocks = super().roll_blocks(data) + [
            ("custom_envs", f"custom_envs.{tag}", env)
            for tag, env in (data.get("custom_envs") or {}).items()
            if isinstance(env, dict)
        ]
        if isinstance(data.get("reward_normalization"), dict):
            blocks.append(("reward_normalization", "reward_normalization", data["reward_normalization"]))
        return blocks


def check_rollout_only(config: "AgenticConfig") -> None:
    """No actor_train (ROLL's agentic rollout pipeline): the RL keys are not read, a reference or critic is not
    started (describe_config says so, as ROLL ignores them); training-only run settings are refused."""
    if config.async_generation_ratio:
        raise ConfigError("'async_generation_ratio' needs 'actor_train': a rollout-only run has no training to overlap")
    if config.resume_from_checkpoint:
        raise ConfigError("'resume_from_checkpoint': a rollout-only run (no actor_train) saves no checkpoints")


def grpo_group_of_one(config: "AgenticConfig") -> None:
    """ROLL's agentic `grpo` is REINFORCE on the episode scores as reward_normalization leaves them (its
    agentic_compute_advantage sends grpo down the reinforce branch; the group comparison, if any, is the
    normalisation's). roll's grpo normalises each episode group in the estimator as well, which needs a group of
    at least two; with group_size 1 there is nothing to compare, and roll runs what ROLL runs (the estimator's
    registered `agentic_group_of_one`: reinforce)."""
    from roll.algorithms import get_adv_estimator_spec

    try:
        spec = get_adv_estimator_spec(config.adv_estimator)
    except (KeyError, ValueError):
        return  # an unknown name: check_algorithm reports it
    if spec.agentic_group_of_one and config.train_env_manager.group_size == 1:
        logger.warning(
            "adv_estimator %s with train_env_manager.group_size 1 runs as %s on the normalised episode scores, "
            "which is what ROLL's agentic pipeline computes for it (no group to compare within)",
            config.adv_estimator,
            spec.agentic_group_of_one,
        )
        config.adv_estimator = spec.agentic_group_of_one


def check_segment_ratio(config: "AgenticConfig") -> None:
    """ratio_type: segment sets the PPO ratio's level: not with importance_sampling seq, only for the PPO loss."""
    mode = effective_policy_loss_mode(config)
    if config.ratio_type == "segment":
        if config.importance_sampling == "seq":
            raise ConfigError(
                "'ratio_type' = segment and 'importance_sampling' = seq both set the PPO ratio's level; keep one"
            )
        if mode != "vanilla":
            raise ConfigError(
                f"'ratio_type' = segment applies to the PPO loss (policy_loss_mode: vanilla / pg_variant: ppo), "
                f"but the loss is {mode!r}; set ratio_type: token or use the PPO loss"
            )


def agentic_optimizer_steps(config: "AgenticConfig") -> dict:
    """Optimizer steps per pipeline step for LR schedules. Step-wise samples vary in number: the estimate
    assumes max_turns samples per trajectory."""
    out = {}
    turns = max(rows_per_episode(env) for env in config.custom_envs.values())
    for name in ("actor_train", "critic"):
        worker = getattr(config, name)
        if worker is None:
            continue
        args = worker.training_args
        size = args.per_device_train_batch_size * args.gradient_accumulation_steps * data_parallel_size(worker)
        out[name] = config.ppo_epochs * math.ceil(config.rollout_batch_size * turns / size)
    return out


def load_agentic_config(composed) -> AgenticConfig:
    """A composed DictConfig → a validated AgenticConfig (roll.configs.load_config)."""
    from roll.configs import load_config

    return load_config(AgenticConfig, composed)
