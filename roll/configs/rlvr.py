"""The RLVR (PPO/GRPO-family) pipeline config: prompts with verifiable rewards.

The roles and the RL maths are shared with the agentic pipeline (`roll.configs.algorithm`); this adds
the prompt batch shape, the reward domains and the held-out prompts.
"""

from dataclasses import dataclass

from roll.configs.algorithm import RLAlgorithmConfig
from roll.configs.checks import (
    batch_plan,
    check_algorithm,
    check_model_types,
    check_roles,
    check_run_length,
    check_strategy_configs,
    roles,
)
from roll.configs.generation_checks import check_async, check_generation
from roll.configs.loader import field_help
from roll.configs.profiler import check_profiler
from roll.configs.worker import RewardConfig, ValidationConfig


@dataclass
class RLVRConfig(RLAlgorithmConfig):
    # the loader: `<key>.<name>: null` drops an inherited entry of these maps; their entries are named roles
    DROPPABLE_MAPS = ("rewards",)
    NAMED_ROLE_MAPS = ("rewards",)

    rewards: dict[str, RewardConfig] = field_help(
        default_factory=dict,
        help="reward domains: rewards.<domain> with worker_cls and tag_included; `rewards.<domain>: null` drops a "
        "domain an included YAML defines (as `reference: null` drops the role)",
    )
    validation: ValidationConfig | None = field_help(None, "held-out prompts scored every eval_steps")
    rollout_batch_size: int = field_help(8, "prompts per pipeline step", bounds="[1, inf)")
    allow_repeated_prompts_in_step: bool = field_help(
        False,
        "a training file (or a domain_interleave_probs domain) with fewer prompts than one step draws "
        "(rollout_batch_size, or the domain's share): false refuses to start (the step would train on copies of "
        "the same prompts); true trains on the repeats with a warning (docs/reliability.md)",
    )
    num_return_sequences_in_group: int = field_help(
        1, "samples per prompt (the group for GRPO-style estimators)", bounds="[1, inf)"
    )
    val_batch_size: int = field_help(64, "prompts per validation generate call", bounds="[1, inf)")
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
        bounds="[0, inf)",
    )

    async_generation_ratio: float = field_help(
        0.0,
        "off-policy rollout: the rollout of steps t+1..t+k is generated while step t trains (k = this value, a "
        "whole number; 0 = the synchronous loop). Needs actor_infer on devices no other model role uses "
        "(docs/async.md)",
        bounds="[0, inf)",
    )
    generate_opt_level: int = field_help(
        0,
        "0: one batched generate call per step (deterministic); 1: request-level rollout: prompt groups stream to "
        "actor_infer as requests and each finished group is scored while generation goes on (docs/async.md). "
        "ROLL's default is 1",
        bounds="[0, 1]",
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
        bounds="[0, inf)",
    )
    async_stale_samples: str = field_help(
        "regenerate",
        "async: a batch older than async_max_lag is 'regenerate'd (same prompts, current weights) or "
        "'drop'ped (fresh prompts, current weights); either way it is counted, never trained on",
    )

    @property
    def group(self) -> tuple[str, int]:
        """(key, value) of the GRPO group size: the samples compared with each other."""
        return "num_return_sequences_in_group", self.num_return_sequences_in_group

    def validate(self) -> None:
        """The rules that join fields of several blocks, after the strict build checked each field (types,
        ranges, keys); the first broken rule raises ConfigError naming its keys and the fix."""
        check_run_length(self)
        check_model_types(self)
        check_roles(self)
        check_generation(self)
        check_async(self)
        check_algorithm(self)
        check_profiler(self, roles(self))
        batch_plan(self)  # raises on batch sizes that do not divide
        check_strategy_configs(self)  # each engine's own keys, all reported together
