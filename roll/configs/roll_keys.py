"""ROLL's config vocabulary: every ROLL key roll does not declare under the same name, in one table.

A key ROLL spells like roll (same name, same meaning) is simply a dataclass field and is not listed.
Each entry here is one of:
  alias    ROLL's spelling, rewritten to roll's by `roll.configs.roll_compat` before strict loading
  refused  a key or value roll will not take, with the reason
`block` is where the key sits: "" = top level, "<role>" = any role block (actor_train, rewards.math, ...),
or a sub-block name (model_args, data_args, generating_args, training_args) inside any role.
docs/roll_compatibility.md is generated from this table (python -m roll.configs.roll_compat).
"""

from dataclasses import dataclass

ALIAS, REFUSED = "alias", "refused"


@dataclass(frozen=True)
class RollKey:
    block: str
    key: str
    status: str
    note: str


_UNREAD = "ROLL's example YAMLs set this key but ROLL's code never reads it, so another value would mislead"

ROLL_KEYS: list[RollKey] = [
    # top level
    RollKey("", "hydra", ALIAS, "Hydra's own run settings (run dir, job name); removed before loading"),
    RollKey("", "pretrain", ALIAS, "ROLL's model-path variable for `${pretrain}`; removed after interpolation"),
    RollKey(
        "",
        "reward_pretrain",
        ALIAS,
        "ROLL's reward-model variable for `${reward_pretrain}`; removed after interpolation",
    ),
    RollKey(
        "",
        "sequence_length",
        ALIAS,
        "roll's token budget per sample is prompt_length + response_length; sequence_length is checked to be ≥ it",
    ),
    RollKey(
        "",
        "val_prompt_length",
        ALIAS,
        "validation prompts use prompt_length; val_prompt_length must equal it (a different value is an error)",
    ),
    RollKey(
        "",
        "checkpoint_config",
        ALIAS,
        "type: file_system only; output_dir becomes the top-level output_dir (checkpoints then go to "
        "<output_dir>/checkpoints/step-N); a different top-level output_dir is an error",
    ),
    RollKey(
        "",
        "is_num_return_sequences_expand",
        ALIAS,
        "true | false: how ROLL's scheduler splits a prompt's num_return_sequences into engine requests; roll asks "
        "the engine for all of them in one request, and the samples are the same either way",
    ),
    RollKey(
        "",
        "max_running_requests",
        ALIAS,
        "requests in flight per inference worker = actor_infer's engine limit: vllm strategy_config.max_num_seqs, "
        "sglang strategy_config.max_running_requests (hf_infer has no request queue: refused)",
    ),
    *[
        RollKey("", key, ALIAS, f"{inert}: {why}")
        for key, inert, why in (
            ("reward_norm", "null only", _UNREAD + "; normalise rewards with norm_mean_type / norm_std_type"),
            ("reward_shift", "false only", _UNREAD + "; subtract a mean with norm_mean_type"),
            ("reward_scale", "false only", _UNREAD + "; divide by a std with norm_std_type"),
            ("use_reward_norm", "false only", _UNREAD + "; normalise rewards with norm_mean_type / norm_std_type"),
            ("add_len_reward", "false only", _UNREAD + "; shape by length with max_len_mask or the length masks"),
            ("use_topr_loss", "false only", _UNREAD + "; select the TOPR loss with pg_variant: topr"),
        )
    ],
    *[
        RollKey(
            "",
            key,
            REFUSED,
            "roll profiles with a `profiler` block (tool: torch | torch_memory | nsys, steps, ranks, save_path; "
            "docs/profiling.md) at pipeline level or per role",
        )
        for key in ("profiler_timeline", "profiler_output_dir", "profiler_memory")
    ],
    # model_args
    RollKey("model_args", "dtype", ALIAS, "fp32 | bf16 | fp16 = float32 | bfloat16 | float16 (both spellings taken)"),
    # data_args
    RollKey("data_args", "prompt", ALIAS, "= prompt_key (column holding the prompt)"),
    RollKey("data_args", "messages", ALIAS, "= messages_key (column holding chat messages)"),
    RollKey("data_args", "tag", ALIAS, "= tag_key (column selecting the reward domain)"),
    RollKey(
        "data_args",
        "template",
        ALIAS,
        "native, qwen2_5 = apply_chat_template: true (the tokenizer's chat template); qwen3 = the same with "
        "enable_thinking (chat_template: qwen3); chatml = chat_template: chatml; ROLL's base, empty, "
        "longCOT_qwen2.5, longcot_V3 (prompt rewrites) are refused",
    ),
    RollKey("data_args", "dataset_dir", ALIAS, "directory that relative file_name entries are resolved against"),
    # generating_args
    RollKey(
        "generating_args",
        "num_beams",
        ALIAS,
        "1 only (sampling); beam search is refused: its samples have "
        "no per-token sampling probability, which every policy-gradient estimator here needs",
    ),
    # training_args
    # actor_train: ROLL keeps its actor-loss settings in the actor's block, roll at the top level
    *[
        RollKey("actor_train", key, ALIAS, f"= top-level {key} (the same value at both places is fine)")
        for key in ("pg_variant", "topr_positive_weight", "topr_negative_weight")
    ],
    RollKey(
        "actor_train",
        "worker_cls",
        ALIAS,
        "ROLL's roll.pipeline.rlvr.actor_worker.ActorWorker and actor_pg_worker.ActorPGWorker = roll's ActorWorker "
        "(which runs every pg_variant); another roll.pipeline.* path is refused",
    ),
]
ROLL_ACTOR_WORKERS = (
    "roll.pipeline.rlvr.actor_worker.ActorWorker",
    "roll.pipeline.rlvr.actor_pg_worker.ActorPGWorker",
    "roll.pipeline.base_worker.ActorWorker",
)

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

# ROLL reward worker dotted paths → roll's classes. A target whose module does not exist yet is pending.
ROLL_REWARD_WORKERS = {
    "roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker": (
        "roll.workers.rewards.math_rule.MathRuleRewardWorker"
    ),
    "roll.pipeline.rlvr.rewards.multiple_choice_boxed_rule_reward_worker.MultipleChoiceBoxedRuleRewardWorker": (
        "roll.workers.rewards.choice_rule.MultipleChoiceRewardWorker"
    ),
    "roll.pipeline.rlvr.rewards.code_sandbox_reward_worker.CodeSandboxRewardWorker": (
        "roll.workers.rewards.code_sandbox.CodeSandboxRewardWorker"
    ),
    "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker": (
        "roll.workers.rewards.llm_judge.LLMJudgeRewardWorker"
    ),
    "roll.pipeline.rlvr.rewards.ifeval_rule_reward_worker.GeneralRuleRewardWorker": (
        "roll.workers.rewards.ifeval_rule.GeneralRuleRewardWorker"
    ),
    "roll.pipeline.rlvr.rewards.general_val_rule_reward_worker.GeneralValRuleRewardWorker": (
        "roll.workers.rewards.ifeval_rule.GeneralRuleRewardWorker"
    ),
    "roll.pipeline.rlvr.rewards.crossthinkqa_rule_reward_worker.CrossThinkQARuleRewardWorker": (
        "roll.workers.rewards.crossthinkqa_rule.CrossThinkQARuleRewardWorker"
    ),
}
ROLL_REWARD_PREFIX = "roll.pipeline.rlvr.rewards."
