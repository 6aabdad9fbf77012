"""ROLL's config vocabulary: every ROLL key roll does not declare under the same name, in one table.

A key ROLL spells like roll (same name, same meaning) is simply a dataclass field and is not listed.
Each entry here is one of:
  alias    ROLL's spelling, rewritten to roll's by `roll.configs.roll_compat` before strict loading
  refused  a key or value roll will not take, with the reason
`block` is where the key sits: "" = top level, "<role>" = any role block (actor_train, rewards.math, ...),
or a sub-block name (model_args, data_args, generating_args, training_args) inside any role.
docs/roll_compatibility.md is generated from this table (python scripts/roll_compat_page.py).
"""

from dataclasses import dataclass

ALIAS, REFUSED = "alias", "refused"


@dataclass(frozen=True)
class RollKey:
    block: str
    key: str
    status: str
    note: str


ENV_YAML_VARIABLES = (
    "all_response_pattern",
    "single_prompt_agent_system_template",
    "single_prompt_agent_template",
    "custom_env",
    "default_history_length",
    *(f"gem_{kind}" for kind in ("games", "rg", "math", "qa", "code")),
)
_IGNORED = "accepted with a logged note, no effect: "
_UNREAD = "ROLL declares it and reads it nowhere"
_DROPPED = "not a field of ROLL's configs, so ROLL's loader drops it"

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
        "student_pretrain",
        ALIAS,
        "offline distillation: the student's model directory where student.model_args.model_name_or_path is unset",
    ),
    RollKey(
        "",
        "teacher_pretrain",
        ALIAS,
        "offline distillation: the teacher's model directory where teacher.model_args.model_name_or_path is unset",
    ),
    RollKey(
        "",
        "sequence_length",
        ALIAS,
        "ROLL's row width (agentic: the whole trajectory). roll's row is prompt_length + response_length, checked "
        "to be ≤ sequence_length; in an agentic config the unset one(s) are derived from it: response_length = "
        "sequence_length − prompt_length (prompt_length set or roll's default; step manager only: response_length "
        "= max_tokens_per_step + 1), or prompt_length = sequence_length − response_length; --dry_run prints them",
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
        RollKey("", key, ALIAS, _IGNORED + why)
        for key, why in (
            ("reward_norm", _DROPPED + "; normalise rewards with norm_mean_type / norm_std_type"),
            ("reward_shift", _DROPPED + "; subtract a mean with norm_mean_type"),
            ("reward_scale", _DROPPED + "; divide by a std with norm_std_type"),
            ("use_reward_norm", "true | false; " + _UNREAD + "; normalise rewards with norm_mean_type / norm_std_type"),
            ("add_len_reward", "true | false; " + _UNREAD + "; shape by length with max_len_mask or the length masks"),
            ("use_topr_loss", "true | false; " + _UNREAD + "; select the TOPR loss with pg_variant: topr"),
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
            "accepted and unused: a variable or env library of ROLL's env YAMLs (examples/config/*envs*.yaml) that "
            "the file does not use and ROLL's code never reads (templates are set per "
            "environment: custom_envs.<tag>.agent_template, agent_system_template, action_pattern)",
        )
        for key in ENV_YAML_VARIABLES
    ],
    *[
        RollKey(
            "",
            key,
            ALIAS,
            f"true | false: ROLL's {what} of rank 0 of every role at every step = profiler.tool: {tool} with "
            "steps 1..max_steps and ranks [0] (false: nothing; both true is an error, as in ROLL)",
        )
        for key, what, tool in (
            ("profiler_timeline", "torch-profiler trace", "torch"),
            ("profiler_memory", "CUDA memory snapshot", "torch_memory"),
        )
    ],
    RollKey(
        "",
        "profiler_output_dir",
        ALIAS,
        "= profiler.save_path (ROLL adds <exp_name>/<timestamp> below it; roll writes <role>/step-<N>/rank<r>.*)",
    ),
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
        ALIAS,
        "read with use_sequence_packing: true, as in ROLL. algorithm none = roll's packing of each micro-batch as "
        "batched; load_balance = packing with dynamic batching: max_packed_sequence_length_train / _forward become "
        "max_tokens_per_microbatch_in_train / _in_infer (use_dynamic_batching_in_train / _in_infer on); "
        "min_num_micro_batches_* (positive integers) have no counterpart and no effect",
    ),
    RollKey("<role>", "use_remove_padding", ALIAS, _IGNORED + "not a field of ROLL's WorkerConfig (ROLL drops it)"),
    RollKey(
        "<role>",
        "offload_nccl",
        ALIAS,
        "true | false, no effect: roll's offload moves weights, optimizer state and KV cache, never NCCL communicators",
    ),
    RollKey(
        "",
        "rpc_timeout",
        ALIAS,
        "= rpc_timeout (seconds) of every role, reward domain and env manager that sets none (ROLL's one timeout "
        "for its remote calls)",
    ),
    RollKey("", "positive_loss_coef", ALIAS, _IGNORED + "not a field of ROLL's RLVRConfig (ROLL drops it)"),
    RollKey("", "model_name", ALIAS, _IGNORED + "not a field of ROLL's configs (ROLL drops it)"),
    RollKey(
        "",
        "skip_mock_system_prompt",
        ALIAS,
        "true only: roll renders the tokenizer's chat template as it is; ROLL's false (its default) strips the "
        "template's default system block from prompts without a system message, which roll does not",
    ),
    RollKey(
        "",
        "parse_tool_call_parameter_to_dict",
        ALIAS,
        "true | false, no effect: ROLL decodes tool-call arguments given as JSON strings to objects before its "
        "agent-native manager re-renders a conversation; roll's agent_native manager never re-renders a reply "
        "(token in, token out) and always decodes parsed arguments to objects (roll.agentic.tool_calls)",
    ),
    RollKey(
        "",
        "use_topr_neg_loss_coef",
        ALIAS,
        "a number, " + _IGNORED + "ROLL declares it as a float and reads it nowhere",
    ),
    RollKey(
        "",
        "enable_old_logprobs_recompute",
        ALIAS,
        "true | false, no effect: ROLL overwrites it from its batch arithmetic; roll's choice of old log-probs "
        "is use_rollout_log_probs (the rollout engine's where shown exact, else an actor_train pass)",
    ),
    RollKey(
        "",
        "reward_model",
        ALIAS,
        "ROLL's judge server, with exactly one rewards.<domain> of judge_model_type: cluster: its model_args, "
        "strategy_args, device_mapping (and num_gpus_per_worker, infer_batch_size, generating_args, system_envs "
        "the domain leaves unset) move into that domain, which then judges with its own engine "
        "(judge_model_type: inference; world_size follows the devices instead of ROLL's client count)",
    ),
    RollKey(
        "validation",
        "eval_steps",
        ALIAS,
        _IGNORED + "not a field of ROLL's validation block (ROLL drops it); the top-level eval_steps sets the cadence",
    ),  # fmt: skip
    # agentic: custom_envs.<tag> and reward_normalization
    RollKey("custom_envs", "max_steps", ALIAS, "= max_turns (the model's moves per episode at most)"),
    RollKey(
        "custom_envs",
        "env_manager_cls",
        ALIAS,
        "ROLL's TrajEnvManager = env_manager: traj, StepEnvManager = env_manager: step, StepConcatEnvManager = "
        "env_manager: step_concat, AgentNativeStepEnvManager = env_manager: agent_native, ProxyEnvManager = "
        "env_manager: proxy (docs/agents.md); other classes are refused, each with its reason",
    ),
    RollKey(
        "custom_envs",
        "max_env_step_concurrent",
        ALIAS,
        "an integer ≥ 0, no effect: ROLL caps concurrent env.step calls of the tag with it (0 = no cap); roll's "
        "env steps run one at a time per environment worker",
    ),
    RollKey(
        "custom_envs",
        "agent_runner_cls",
        ALIAS,
        "roll's key of the same meaning (env_manager: proxy: the class that plays each episode through the "
        "endpoint); ROLL's GEMRunner = roll.agentic.envs.runners.EnvRunner; its ToolCallRunner and ROCK runners are "
        "refused with their reason; null for the other env managers",
    ),
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
        "flash_attn",
        ALIAS,
        _IGNORED + "not a field of ROLL's ModelArguments (ROLL drops it; attention is chosen by attn_implementation)",
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
        "enable_thinking (chat_template: qwen3); chatml = chat_template: chatml; qwen3_coder (named by ROLL's "
        "agentic examples, registered nowhere in ROLL, whose env managers use the tokenizer's template) = "
        "apply_chat_template: true; ROLL's base, empty, longCOT_qwen2.5, longcot_V3 (prompt rewrites) are refused",
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
    RollKey(
        "generating_args",
        "include_stop_str_in_output",
        ALIAS,
        "true or null only (ROLL's default): roll keeps a matched stop string in the response; false is refused",
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


# Differences met by ROLL's current example YAMLs (added to docs/roll_compatibility.md after DIFFERENCES)
EXAMPLE_DIFFERENCES = [
    (
        "an agentic config without actor_train",
        "ROLL runs it with its own launcher (start_agentic_rollout_pipeline.py, AgenticRolloutPipeline); roll's "
        "start_agentic_pipeline.py runs it as that rollout pipeline (docs/agentic.md). ROLL's rollout pipeline never "
        "validates; roll validates a configured val_env_manager every eval_steps",
    ),
    (
        "custom_envs.<tag>.history_length (step manager)",
        "the earlier turns shown; ROLL's StepEnvManager takes its window as history[-history_length:-1], which "
        "counts the current turn, so it shows history_length − 1 earlier turns (roll's step_concat manager follows "
        "ROLL; for ROLL's step prompt set history_length one lower)",
    ),
    (
        "custom_envs.<tag>.history_length: 0 (step_concat manager)",
        "no earlier observations; ROLL's StepConcatEnvManager slices its history with [-0:-1] and so shows all of them",
    ),
    (
        "rollout_mock",
        "dump / replay with ROLL's layout (<dump_dir>/train|val/step_<NNNNNN>.pkl), but the pickles hold roll's "
        "batch classes: a dump replays in roll, not in ROLL (and the other way round)",
    ),
    (
        "rollout_dump_dir",
        "written for any path, with the same columns in both pipelines; ROLL writes it only for an absolute path "
        "(a relative one, as in its agentic_demo examples, writes nothing) and, in its agentic pipeline, from "
        "the columns its env managers name",
    ),
    (
        "train_infer_correction",
        "always applied after the advantages, as ROLL does with enable_old_logprobs_recompute: true (roll always "
        "recomputes the old log-probs); ROLL's other path, inside the loss, has no counterpart",
    ),
    (
        "model_args.freeze_module_prefix",
        "applied by deepspeed_train and fsdp2_train (HF parameter names); megatron_train refuses it (ROLL freezes "
        "megatron-core names there); a prefix that matches no parameter stops the run (ROLL freezes nothing)",
    ),
    (
        "model_download_type: MODELSCOPE",
        "accepted for local model directories; a path that would need a ModelScope download fails at start-up "
        "(ROLL downloads it)",
    ),
    (
        "profiler_memory / profiler_timeline",
        "profile rank 0 of every role at every step 1..max_steps through the profiler block (one trace or "
        "snapshot per role, rank and step); ROLL writes one per decorated worker call",
    ),
    (
        "adv_estimator: grpo (agentic, group_size ≥ 2)",
        "normalises each episode group in the estimator, after reward_normalization; ROLL's agentic grpo is "
        "REINFORCE on the reward_normalization output (no second normalisation). For ROLL's: adv_estimator: "
        "reinforce. With group_size 1 roll runs reinforce itself, as ROLL",
    ),
    (
        "agentic prompts without a system message",
        "rendered with the tokenizer's chat template as it is (Qwen2.5's then adds its default system prompt); "
        "ROLL by default (skip_mock_system_prompt: false) strips that default system block",
    ),
    (
        "batch_adjust_mode: copy",
        "pads a step's rows up with rows that carry no loss; ROLL repeats randomly chosen real rows, which then "
        "count twice in the loss",
    ),
    (
        "critic.model_args.model_type: trl",
        "taken as auto_token_classification, roll's critic value head (one scalar per token from the LM's last "
        "hidden state, as trl's value head); ROLL's trl-format critic checkpoints (v_head.*) do not load into it",
    ),
    (
        "custom_envs.<tag>.agent_template (step manager)",
        "{history} lists every turn of the history window; ROLL's StepEnvManager lists only the turns whose "
        "action was invalid (its history entries are appended inside the invalid-action branch)",
    ),
]
