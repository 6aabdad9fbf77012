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
    RollKey(
        "",
        "pretrain",
        ALIAS,
        "the model directory of actor_train, actor_infer and reference where their model_args.model_name_or_path "
        "is unset (ROLL then overwrites all three; roll never overwrites a set path); also usable as ${pretrain}",
    ),
    RollKey(
        "",
        "reward_pretrain",
        ALIAS,
        "the critic's model directory where critic.model_args.model_name_or_path is unset; also usable as "
        "${reward_pretrain}",
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
        "type: file_system only; output_dir becomes the top-level checkpoint_dir (checkpoints then go to "
        "<checkpoint_dir>/checkpoints/step-N)",
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
    RollKey(
        "",
        "max_grad_norm",
        ALIAS,
        "= training_args.max_grad_norm of every training role (actor_train, critic) that does not set its own; "
        "a different value there is an error",
    ),
    RollKey(
        "",
        "render_save_dir",
        ALIAS,
        "accepted and unused: ROLL only adds a timestamp to this path and never writes frames there; roll writes "
        "each step's episode transcripts to <output_dir>/samples",
    ),
    *[
        RollKey(
            "",
            key,
            ALIAS,
            "accepted and unused: a variable of ROLL's env YAMLs that ROLL's code never reads (templates are set per "
            "environment: custom_envs.<tag>.agent_template, agent_system_template, action_pattern)",
        )
        for key in ("all_response_pattern", "single_prompt_agent_system_template", "single_prompt_agent_template")
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
    RollKey(
        "",
        "global_template",
        ALIAS,
        "= data_args.template of actor_train and validation (where they set none; a different one is an error)",
    ),
    # any model role (actor_train, actor_infer, reference, critic)
    *[
        RollKey(
            "<role>",
            key,
            ALIAS,
            "a positive integer, no effect: ROLL trims each dynamic micro-batch to its longest row rounded up to "
            "this; roll's micro-batches keep the batch's padded width (one shape for the whole run)",
        )
        for key in ("sequence_length_round_in_train", "sequence_length_round_in_infer")
    ],
    RollKey(
        "<role>",
        "sequence_packing_args",
        REFUSED,
        "roll packs each micro-batch whole (use_sequence_packing); its size comes from per_device_train_batch_size / "
        "infer_batch_size or, with use_dynamic_batching_in_train/_infer, max_tokens_per_microbatch_in_train/_infer. "
        "ROLL's packing algorithms and per-pack lengths have no counterpart",
    ),
    RollKey(
        "",
        "batch_adjust_mode",
        ALIAS,
        "copy | auto: roll fills a step's rows up to a multiple of the global batch with padding rows that carry no "
        "loss (ROLL's copy repeats real rows); delete and random_sample (drop trajectories) are refused",
    ),
    # agentic: custom_envs.<tag> and reward_normalization
    RollKey("custom_envs", "max_steps", ALIAS, "= max_turns (the model's moves per episode at most)"),
    RollKey(
        "custom_envs",
        "env_manager_cls",
        ALIAS,
        "ROLL's TrajEnvManager = env_manager: traj, StepEnvManager = env_manager: step; other classes are refused",
    ),
    RollKey("custom_envs", "agent_runner_cls", ALIAS, "null only (ROLL's default: the env manager plays the episode)"),
    RollKey(
        "custom_envs",
        "use_thread_lock",
        ALIAS,
        "true | false, no effect: ROLL serialises CPU-heavy env steps with it; roll's env steps run one at a time "
        "per environment worker",
    ),
    *[
        RollKey(
            "custom_envs",
            f"env_config.{key}",
            ALIAS,
            f"= custom_envs.<tag>.{key} (ROLL keeps it among the environment's settings; roll's env manager "
            "applies it)",
        )
        for key in ("action_pattern", "format_penalty", "env_instruction")
    ],
    RollKey(
        "reward_normalization",
        "method",
        ALIAS,
        "ROLL's older spelling: identity = norm_mean_type/norm_std_type null; mean = the grouping's mean; mean_std "
        "and asym_clip = mean and std (scope: batch if grouping is batch, else group); an explicit "
        "norm_mean_type/norm_std_type must agree",
    ),
    # model_args
    RollKey("model_args", "dtype", ALIAS, "fp32 | bf16 | fp16 = float32 | bfloat16 | float16 (both spellings taken)"),
    RollKey(
        "model_args",
        "ulysses_size",
        ALIAS,
        "1 or null only: Ulysses sequence parallelism is not built in roll; long sequences are split by "
        "megatron_train's tensor/pipeline parallelism instead",
    ),
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
    "roll.pipeline.agentic.agentic_actor_worker.ActorWorker",
    "roll.pipeline.agentic.agentic_actor_pg_worker.ActorWorker",
)

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

# ROLL reward worker dotted paths → roll's classes: the loader rewrites a ROLL path to ours (no shim modules).
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
