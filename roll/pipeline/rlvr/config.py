"""The RLVR (PPO/GRPO-family) pipeline config: prompts with verifiable rewards.

The roles and the RL maths are shared with the agentic pipeline (`roll.configs.algorithm`); this adds
the prompt batch shape, the reward domains and the held-out prompts.
"""

from dataclasses import dataclass

from roll.configs.algorithm import RLAlgorithmConfig
from roll.configs.checks import check_model_types, check_roles, check_run_length, check_strategy_configs, roles
from roll.configs.loader import ConfigError, field_help
from roll.configs.profiler import check_profiler
from roll.configs.rl_checks import check_actor_roles, check_algorithm, check_async, check_lora_weight_sync
from roll.configs.worker import RewardConfig, RewardFilterConfig, ScorerConfig, ValidationConfig
from roll.pipeline.rlvr.config_checks import batch_plan, check_async_rlvr, check_generation, check_request_rollout


@dataclass
class RLVRConfig(RLAlgorithmConfig):
    KIND = "rlvr"
    PIPELINE = "roll.pipeline.rlvr.pipeline.run_pipeline"
    DEFAULT_CONFIG = ("tiny_rlvr", "rlvr_tiny")
    DROPPABLE_MAPS = ("rewards",)
    NAMED_ROLE_MAPS = ("rewards",)
    FINGERPRINT_KEYS = ("rollout_batch_size", "num_return_sequences_in_group", "adv_estimator")
    DOC_SECTIONS = (
        ("Reward domains: `rewards.<domain>` (all role keys, plus)", RewardConfig),
        ("Dynamic sampling: `rewards.<domain>.query_filter_config`, `response_filter_config`", RewardFilterConfig),
        ("Several scorers: `rewards.<domain>.scorers[i]` (all role keys, plus)", ScorerConfig),
        ("`validation`", ValidationConfig),
    )

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
        check_actor_roles(self)
        if not self.rewards:
            raise ConfigError(
                "'rewards' is empty: add at least one domain, e.g. rewards.math with worker_cls "
                "roll.workers.rewards.math_rule.MathRuleRewardWorker"
            )
        check_roles(self)
        check_lora_weight_sync(self)
        check_generation(self)
        check_request_rollout(self)
        check_async(self, kind_rules=lambda ratio: check_async_rlvr(self, ratio))
        check_algorithm(self)
        check_profiler(self, roles(self))
        batch_plan(self)  # raises on batch sizes that do not divide
        check_strategy_configs(self)  # each engine's own keys, all reported together

    # ---- the kind interface (roll/configs/base.py) -------------------------------------------------------
    def extra_roles(self) -> dict:
        """The reward domains' scorers: one role per scorer (`rewards.<domain>` or `rewards.<domain>.<name>`)."""
        out = {}
        for reward in self.rewards.values():
            out.update({role: worker for role, (_, _, worker) in reward.scorer_roles().items()})
        return out

    def rows_per_step(self) -> tuple[int, str]:
        return self.rollout_batch_size * self.num_return_sequences_in_group, (
            f"rollout_batch_size {self.rollout_batch_size:,} × num_return_sequences_in_group "
            f"{self.num_return_sequences_in_group:,}"
        )

    def start_up_checks(self, tokenizer_dir: str) -> list:
        from roll.pipeline.rlvr.config_checks import check_prompt_template

        return [lambda: check_prompt_template(self, tokenizer_dir)]

    def optimizer_steps(self) -> dict:
        return batch_plan(self).optimizer_steps

    def describe_plan(self) -> str:
        return batch_plan(self).describe()

    def describe_notes(self) -> list[str]:
        from roll.configs.roll_compat import reward_mapping

        return [*reward_mapping(self), *super().describe_notes()]

    def check_inputs(self) -> "RLVRConfig":
        """A data tag no reward domain takes, ground truths a domain grades against that are missing, NaN or empty,
        too few prompts for one step: refused here, by --dry_run too."""
        from roll.pipeline.rlvr.data_checks import check_data_files
        from roll.pipeline.rlvr.routing import check_data_routes

        config = check_data_routes(self)
        check_data_files(config)
        return config

    @classmethod
    def roll_translate(cls, data: dict, problems: list, first: bool) -> None:
        """ROLL's judge server (first: its blocks then get the aliases of their new place) and reward workers."""
        from roll.configs.roll_compat.judge import judge_server
        from roll.configs.roll_compat.translate import reward_worker

        if first:
            problems.extend(judge_server(data))
            return
        super().roll_translate(data, problems, first)
        for domain, reward in (data.get("rewards") or {}).items():
            if isinstance(reward, dict) and isinstance(reward.get("worker_cls"), str):
                original = reward["worker_cls"]
                reward_worker(reward, f"rewards.{domain}.worker_cls", problems)
                if reward["worker_cls"] != original:  # ROLL's path was given: --dry_run shows the mapping
                    data.setdefault("__roll__", {}).setdefault("reward_worker_cls", {})[domain] = original

    @classmethod
    def roll_blocks(cls, data: dict) -> list:
        block = data.get("validation")
        return [*super().roll_blocks(data), *([("validation", "validation", block)] if isinstance(block, dict) else [])]

    def opd_routing(self) -> tuple[str, dict[str, set]]:
        """Teachers take rows by reward domain (ROLL's domain_2_tag): a domain's tags are its tag_included."""
        return "domain", {domain: set(reward.tag_included) for domain, reward in self.rewards.items()}

    def note_roll_keys(self, extra: dict) -> None:
        from roll.configs.roll_compat import note_roll_spellings

        note_roll_spellings(self, extra)


def load_rlvr_config(composed) -> RLVRConfig:
    """A composed DictConfig → a validated RLVRConfig (roll.configs.load_config)."""
    from roll.configs import load_config

    return load_config(RLVRConfig, composed)
