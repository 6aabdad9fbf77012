"""The RLVR (PPO/GRPO-family) pipeline config: prompts with verifiable rewards.

The roles and the RL maths are shared with the agentic pipeline (`roll.configs.algorithm`); this adds
the prompt batch shape, the reward domains and the held-out prompts.
"""

from dataclasses import dataclass

from roll.configs.algorithm import RLAlgorithmConfig
from roll.configs.loader import ConfigError, field_help
from roll.configs.worker import RewardConfig, ValidationConfig


@dataclass
class RLVRConfig(RLAlgorithmConfig):
    rewards: dict[str, RewardConfig] = field_help(
        default_factory=dict,
        help="reward domains: rewards.<domain> with worker_cls and tag_included; `rewards.<domain>: null` drops a "
        "domain an included YAML defines (as `reference: null` drops the role)",
    )
    validation: ValidationConfig | None = field_help(None, "held-out prompts scored every eval_steps")
    rollout_batch_size: int = field_help(8, "prompts per pipeline step")
    num_return_sequences_in_group: int = field_help(1, "samples per prompt (the group for GRPO-style estimators)")
    val_batch_size: int = field_help(64, "prompts per validation generate call")
    # dynamic sampling (ROLL's keys): refill the groups that rewards.<domain>.query_filter_config drops
    is_use_additional_prompts: bool = field_help(
        False,
        "with a query_filter_config on: draw more prompts (more generation rounds) until rollout_batch_size "
        "groups pass the filter; off = the dropped groups' places are back-filled with dropped groups",
    )
    max_additional_running_prompts: int = field_help(
        16,
        "most extra prompts drawn per pipeline step by is_use_additional_prompts; when spent, the batch is "
        "completed with dropped groups and a warning is logged",
    )

    async_generation_ratio: float = field_help(
        0.0,
        "off-policy rollout: the rollout of steps t+1..t+k is generated while step t trains (k = this value, a "
        "whole number; 0 = the synchronous loop). Needs actor_infer on devices no other model role uses "
        "(docs/async.md)",
    )
    generate_opt_level: int = field_help(
        0,
        "0: one batched generate call per step (deterministic); 1: request-level rollout: prompt groups stream to "
        "actor_infer as requests and each finished group is scored while generation goes on (docs/async.md). "
        "ROLL's default is 1",
    )
    partial_rollout: bool = field_help(
        False,
        "generate_opt_level 1 with async_generation_ratio > 0: a weight sync aborts the requests in flight and "
        "resumes them on the new weights (their samples then mix two policy versions); false: the sync waits for "
        "them to finish on the old weights",
    )
    async_max_lag: int | None = field_help(
        None,
        "async: the largest policy-version lag a trained sample may have (null = async_generation_ratio); "
        "older batches are handled by async_stale_samples",
    )
    async_stale_samples: str = field_help(
        "regenerate",
        "async: a batch older than async_max_lag is 'regenerate'd (same prompts, current weights) or "
        "'drop'ped (fresh prompts, current weights); either way it is counted, never trained on",
    )

    def __post_init__(self):
        super().__post_init__()
        if self.max_additional_running_prompts < 0:
            raise ConfigError(f"'max_additional_running_prompts' = {self.max_additional_running_prompts}: must be >= 0")

    @property
    def group(self) -> tuple[str, int]:
        """(key, value) of the GRPO group size: the samples compared with each other."""
        return "num_return_sequences_in_group", self.num_return_sequences_in_group
