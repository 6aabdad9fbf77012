"""docs/roll_compatibility.md, generated: ROLL's keys and what each is here (roll/configs/roll_compat/keys.py),
the reward-worker mapping, the keys shared under ROLL's names, where a shared name means something else here
(DIFFERENCES), and ROLL's own example YAMLs checked (scripts/roll_examples.py).

    python scripts/roll_compat_page.py > docs/roll_compatibility.md
"""

import dataclasses
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: this checkout's roll and scripts
    sys.path.insert(0, str(ROOT))

from roll.configs.roll_compat.keys import EXAMPLE_DIFFERENCES, ROLL_KEYS, ROLL_REWARD_WORKERS  # noqa: E402
from scripts.roll_examples import examples_section, load_results  # noqa: E402

# Keys roll declares under ROLL's name whose meaning differs; the algorithm-key differences are added by the
# branches that implement those keys.
DIFFERENCES = [
    (
        "logging_dir",
        "the TensorBoard/wandb/swanlab root (runs under <logging_dir>/<exp_name>); ROLL writes its log files "
        "there. roll's log lines go to the console (stderr) and Ray's session logs",
    ),
    (
        "output_dir",
        "samples and learning curves; checkpoints go to <checkpoint_dir>/checkpoints/step-N, where ROLL's "
        "checkpoint_config.output_dir becomes checkpoint_dir (null: output_dir)",
    ),
    (
        "track_with",
        "wandb and swanlab default to offline mode (files under the run directory); ROLL's default is online. "
        "Set tracker_kwargs.mode: online to upload",
    ),
    (
        "generate_opt_level",
        "default 0 (one batched generate call per step, reproducible); ROLL's default is 1 (its request "
        "scheduler, which roll has as generate_opt_level: 1). ROLL requires 1 for async_generation_ratio > 0; "
        "roll runs async with either (0: whole steps queued ahead, docs/async.md)",
    ),
    # ROLL defects in its algorithm keys: roll implements the evident intent (docs/algorithms.md §11)
    (
        "error_max_len_clip",
        "judges only samples with score ≤ 0; ROLL drops every sample whose score is not exactly 0 or 1",
    ),
    (
        "norm_std_type: group",
        "each row is divided by its own group's std, also with a non-group mean; ROLL crashes on that mix",
    ),
    (
        "norm_mean_type / norm_std_type: group",
        "with one sample per prompt, or a constant group, the score becomes 0 (ROLL's agentic rule); ROLL's RLVR "
        "gives NaN",
    ),
    (
        "adv_estimator: grpo",
        "leaves norm_mean_type / norm_std_type as set (grpo normalises in the estimator); ROLL overwrites them",
    ),
    (
        "difficulty_loss_weight",
        "applied, or a clear error when the difficulty column is missing; ROLL silently skips it for object arrays",
    ),
    (
        "use_reward_scaling",
        "divides the scores by their batch std (a constant batch: 0); ROLL declares the key and reads it nowhere",
    ),
    ("reward_clip", "applied once, at response level; ROLL applies it twice (response and token level)"),
    (
        "adv_estimator: gigpo",
        "step groups are formed within each episode group (the GiGPO paper); ROLL pools equal states across groups",
    ),
    ("use_pg_clip_range", "the dual clip uses dual_clip_ratio_c; ROLL uses the constant 1 + 2·pg_clip"),
    ("norm_mean_type / norm_std_type: running", "not offered (batch, group, null); ROLL raises KeyError"),
    # maths kept from verl on purpose, each with ROLL's behaviour and how to get ROLL's numbers (issue 34)
    (
        "dual_clip_loss",
        "default true, capping a negative-advantage token's loss at dual_clip_ratio_c·|A| (3.0, verl); ROLL's "
        "default is false and its cap 1 + 2·pg_clip. For ROLL's: dual_clip_loss: false, or dual_clip_ratio_c: "
        "1 + 2·pg_clip (1.4 at pg_clip 0.2)",
    ),
    (
        "adv_estimator: gae",
        "verl's GAE: advantages are always whitened over the batch's valid tokens, and the (value, advantage) "
        "state is carried across masked positions (γ once per gap, 0 after the last valid token). ROLL whitens "
        "only with whiten_advantages: true (then the two agree) and runs GAE over every column on the unmasked "
        "critic values, padding included; no key gives that",
    ),
    (
        "returns",
        "reinforce / step_reinforce / gigpo returns are masked to the response (= the advantages); ROLL keeps the "
        "discounted sums on prompt and padding columns. Only the value loss reads returns, on the response "
        "mask, so no loss differs",
    ),
    (
        "empty response",
        "its score sits nowhere, so grpo and norm_* count it as 0 in the group and batch statistics; ROLL puts "
        "it on the last prompt column (masked out later) and normalises with the real score. The same whenever "
        "an empty response scores 0 (the rule rewards do)",
    ),
    (
        "loss_agg_mode: seq-mean-*",
        "divides by the non-empty rows of the optimizer step over all ranks (verl), as ROLL's strategies do "
        "(global_valid_samples); ROLL's agg_loss called without counts divides by all B rows: pass "
        "global_batch_size=B to roll.algorithms.agg_loss for that",
    ),
    (
        "entropy_loss_coef",
        "the entropy bonus is taken over the tokens the sample masks keep; ROLL's RLVR actor takes it over every "
        "response token, samples dropped by max_len_mask / difficulty_mask / error_max_len_clip included",
    ),
    (
        "difficulty_loss_weight / length_loss_weight",
        "min, max and the mean-1 renormalisation over the step's batch (lengths before the sample masks, as "
        "ROLL); ROLL computes them per micro-batch. The same when one micro-batch holds the step "
        "(per_device_train_batch_size = rows per step, gradient_accumulation_steps 1, one rank)",
    ),
    ("rl_loss_coef", "also applies in the agentic pipeline; ROLL declares it for RLVR only"),
    (
        "ratio_type: segment",
        "the PPO loss only (refused with tis, topr, cispo, kimi15); ROLL's agentic ActorPGWorker feeds the turn "
        "ratio to those too",
    ),
    (
        "pg_variant",
        "a top-level key (ROLL's actor_train.pg_variant is taken as an alias); roll's ActorWorker runs every "
        "variant, so ROLL's ActorPGWorker path maps to it",
    ),
    (
        "pretrain / reward_pretrain",
        "fill only the model paths left unset; ROLL overwrites the paths of actor_train, actor_infer and reference "
        "with pretrain as soon as one of them is unset",
    ),
    (
        "interleave_probs",
        "draws each prompt's file with these probabilities; ROLL declares the key and reads it nowhere (a single "
        "1.0 is taken as ROLL's no-op)",
    ),
    (
        "eval_steps",
        "without validation data, a warning says no validation will run; ROLL skips validation silently",
    ),
    (
        "custom_envs.<tag>.agent_template",
        "the traj manager renders it for every turn with {observation}, {turn_idx}, {actions_left}, "
        "{max_response_length}, {suffix}; the step manager with ROLL's step placeholders (see below)",
    ),
    (
        "importance_sampling: seq",
        "refused with any loss but PPO (pg_variant ppo / policy_loss_mode vanilla); ROLL's ActorPGWorker "
        "silently ignores it",
    ),
    # ROLL's tool wrapper and GEM dataset environments (docs/agentic_envs.md)
    (
        "custom_envs.<tag>.tool_wrapper (python_code)",
        "the program always runs in roll's kernel sandbox (namespaces, read-only file system, seccomp, memory_mb "
        "256 for the whole sandbox); ROLL's sandbox_type: none runs it in a plain child process, and both of "
        "ROLL's values (none, bwrap) mean roll's sandbox here",
    ),
    (
        "custom_envs.<tag>.tool_wrapper (search)",
        "the query is POSTed as JSON (Search-R1's retriever protocol), and again as msgpack when the server "
        "refuses JSON with HTTP 400/415/422 (GEM's mosec retriever); GEM's tool sends one fixed encoding. A failed "
        "request reads [search error: custom_envs.<tag>: search request to <url> failed: …] and counts as a "
        "failed call",
    ),
    (
        "custom_envs.<tag>.tool_wrapper (mcp)",
        "one SSE session per exchange (tool list, call), each within tool_args.timeout; ROLL keeps one connection "
        "open. As ROLL, tools are built (and their tool_args checked) only for the tags an env manager runs, so "
        "ROLL's unused placeholder server_url: xxx loads; on a tag that runs it is a config error",
    ),
    (
        "custom_envs.<tag>.tool_wrapper.tool_configs (several tools)",
        "a reply goes to the first tool whose call ran well, else to the first that was called; GEM's loop keeps "
        "the last tool it tried, so a failed call of an earlier tool can pass the reply to the environment",
    ),
    (
        "env_type: roll_math / roll_qa",
        "validation episodes draw rows by their seeds, as training ones; ROLL's validation walks the dataset in "
        "order. Each environment worker process reads the dataset once (ROLL: one Ray actor per dataset)",
    ),
    # GEM's environments that roll builds itself (gem-llm cannot be installed beside roll; docs/agentic_envs.md)
    (
        "env_type: game:GuessTheNumber-v0",
        "GEM 0.0.4's rules, rewards (-0.1 for a reply without \\boxed{<digits>}, which ends the game; 0 for a hint, "
        "a repeat or an out-of-range guess; 1 for the target; 1 − distance/(max − min) for an in-range last guess) "
        "and the target a seed draws; the instructions, hints and info['suffix'] ('Give your next guess.', GEM: "
        "'Enter your next guess.') are roll's own words. \\boxed{0} is a guess of 0 (GEM reads it as no guess). "
        "env_config takes min_number, max_number, max_turns only, as integers with 0 ≤ min < max (GEM ignores "
        "other keys); GEM's -easy/-hard/-random variants are not built",
    ),
    (
        "env_type: rg:letter_counting",
        "reasoning-gym's task and scoring through GEM 0.0.4 (5–15 consecutive words, a letter that occurs in "
        "them; 1 for the exact count, len(count)/len(answer) when the count is inside a longer \\boxed{} answer), "
        "and GEM's choice of question index for a reset seed; the words come from roll's own text (236 words), "
        "not reasoning-gym's book, and the question is worded differently, so the questions differ. The question "
        "depends on (seed, size, reset seed) only: GEM regenerates one instance's dataset after every size "
        "resets. The answer is the last closed \\boxed{…} (GEM also reads \\fbox and gives no answer when the "
        "last \\boxed is unclosed). env_config takes size and seed only",
    ),
    (
        "custom_envs.<tag>.format_penalty with a GEM environment",
        "GEM's own -0.1 is in the reward; a reply without \\boxed{} is also an invalid action, so a nonzero "
        "format_penalty is added on top (roll's default is 0; ROLL's env managers add none to GEM's reward)",
    ),
    # the SFT, DPO and distillation kinds (docs/sft.md, dpo.md, distill.md, onpolicy_distill.md)
    (
        "beta / ipo / label_smoothing (DPO)",
        "used in the DPO loss, rewards and metrics (training and validation); ROLL never passes them to the "
        "loss and always trains sigmoid DPO with beta 0.1",
    ),
    (
        "label_smoothing with ipo: true (DPO)",
        "refused (IPO has no smoothing term); ROLL ignores it",
    ),
    (
        "kd_objective (distillation positions)",
        "the divergence is masked with the shifted labels, the CE's positions; ROLL masks it with the "
        "unshifted labels, one position off (skips the first answer token's prediction, includes the one "
        "after the last label)",
    ),
    (
        "labels_for_loss token count",
        "counts columns 1..S-1 only (tokens some position predicts); ROLL also counts a label at column 0, so"
        " with distill_on_prompt its N has one term per row more than the CE",
    ),
    (
        "kd_objective with -inf logits",
        "masked top-k entries add nothing to value or gradient, gradients stay finite; ROLL's reverse_kl / "
        "adaptive_kl / skewed KLs give NaN gradients there",
    ),
    (
        "kd_objective: adaptive_kl at a zero gap",
        "weights 0.5 / 0.5 (value 0, gradient 0); ROLL divides 0 by 0 (NaN)",
    ),
    (
        "logits_topk: 0 with unequal widths",
        "a clear error naming the teacher's and the student's widths; ROLL fails with a shape error inside the loss",
    ),
    (
        "sequence_length (SFT)",
        "a row longer than sequence_length is an error naming the row; ROLL's collator builds ragged tensors and fails",
    ),
    (
        "kl_penalty: full (on-policy distillation)",
        "refused with a clear error; ROLL's gives a shape error unless B is 1 or T",
    ),
    (
        "use_opd with adv_estimator: gae",
        "the KL is subtracted from verl's GAE advantages, which are already whitened; ROLL subtracts it from "
        "the raw GAE",
    ),
    (
        "num_nodes",
        "the YAML's value, checked against every device_mapping (a mapping past num_nodes × num_gpus_per_node"
        " is an error naming both); ROLL overwrites num_nodes with what the largest mapped device id needs, "
        "whatever the YAML says",
    ),
    (
        "is_pure_opd: false (start_onpolicy_distill_pipeline.py)",
        "refused with the reason; ROLL's launcher overwrites it with true. Mixed on-policy distillation is "
        "use_opd: true in an RLVR or agentic config",
    ),
    (
        "pure_opd_pipeline_type: agentic",
        "refused (pure on-policy distillation on the agentic pipeline is not built; use_opd: true in an "
        "agentic config is)",
    ),
    (
        "reference / use_kl_loss / add_token_level_kl with on-policy distillation",
        "refused with the reason; ROLL rewrites them or takes the first teacher as the reference",
    ),
    (
        "opd_kl_coef at the top level",
        "an unknown-key error (it belongs in each teacher's block); ROLL ignores it",
    ),
    (
        "a teacher's tag_included that no reward domain takes",
        "an error naming the tag; ROLL makes it a domain of its own",
    ),
    (
        "a teacher whose tokenizer differs from the student's (pure on-policy distillation)",
        "refused at start-up (its log-probs would score other tokens); ROLL does not check",
    ),
    (
        "labels of the distillation rows",
        "padding is found by the attention mask (a real end-of-text token equal to the pad id keeps its "
        "label); ROLL compares with the pad id",
    ),
    (
        "max_grad_norm (distillation)",
        "0 means no clipping on every strategy (ROLL's default 0 makes FSDP2 zero the update); the top-level "
        "key sets student.training_args.max_grad_norm, and a different value there is an error",
    ),
    (
        "logits_topk: 0 (distillation)",
        "full-vocabulary distillation on every strategy; ROLL's crashes on Megatron",
    ),
    (
        "distillation validation",
        "runs and reports student/val_loss (token-mean cross-entropy); ROLL's cannot run",
    ),
    (
        "the distillation run length",
        "counts the data-parallel size (rows per step = DP × accumulation × micro-batch); ROLL leaves it out",
    ),
    (
        "logits_transfer_backend",
        "ipc+nccl, nccl-only and ray accepted: the teacher's top-k tensors always travel through Ray's object"
        " store (--dry_run says so)",
    ),
    (
        "teacher log-probs (distillation)",
        "travel as float32; ROLL keeps the logits' dtype (bf16)",
    ),
    (
        "max_steps (SFT)",
        "honoured when set; ROLL's SFT loop ignores it and runs num_train_epochs × the batches of an epoch",
    ),
    (
        "the SFT learning-rate schedule",
        "spans the run's optimizer steps; ROLL's counts epochs × rows // (per_device_train_batch_size × "
        "gradient_accumulation_steps) without the data-parallel size, so with several ranks it is longer than"
        " the run",
    ),
    (
        "eval_steps (SFT)",
        "validates before training, every N steps and after the last step; 0 = never. ROLL validates when "
        "step % eval_steps == 0, and 0 divides by zero",
    ),
    (
        "data_args.apply_chat_template: false (SFT)",
        "refused: the SFT rows are always rendered with the template (as ROLL does)",
    ),
    (
        "validation.data_args.template (SFT)",
        "a template other than sft_train's is refused; ROLL silently uses sft_train's",
    ),
    (
        "batch_balance (SFT)",
        "ROLL's reordering of rows across ranks is not done; the global token-mean gradient is the same",
    ),
    (
        "fsdp2 strategy_config.ep_size / efsdp_size",
        "1 (off) is taken; above 1 refused: ROLL's expert parallelism inside FSDP2 is not built (roll's "
        "expert parallelism is Megatron's)",
    ),
    (
        "DPO validation",
        "over every held-out pair with the configured loss; ROLL reports its last validation batch only, with"
        " the default loss settings",
    ),
    (
        "prompt_key (DPO)",
        "a key of roll's (default instruction); ROLL's DPO pipeline always reads the instruction column",
    ),
    (
        "is_offload_states / is_offload_optimizer_states_in_train_step (DPO)",
        "accepted with a note, no effect: roll offloads colocated roles itself",
    ),
    (
        "data_args.dataset_dir (DPO)",
        "dropped with a warning; ROLL's DPO pipeline never reads it",
    ),
    (
        "the DPO run length",
        "floor(num_train_epochs × steps per epoch), capped by max_steps (only max_steps: that many; neither: "
        "one epoch); ROLL runs int(epochs) passes stopped at max_steps, whose default is 500",
    ),
    (
        "DPO pair order",
        "a seeded shuffle per epoch (a resume continues it exactly); ROLL's DataLoader order. Validation runs"
        " before training, every eval_steps and at the last step",
    ),
    (
        "use_dynamic_batching_in_train (DPO)",
        "refused: token-budget micro-batches could split a chosen/rejected pair",
    ),
]


def compatibility_page() -> str:
    """docs/roll_compatibility.md: the table, the reward mapping, and the keys shared under ROLL's names."""
    from roll.configs.worker import DataArgs, GeneratingArgs, ModelArgs, RewardConfig, TrainingArgs
    from roll.pipeline.kinds import kind_configs

    lines = [
        "# ROLL compatibility",
        "",
        "<!-- generated by `python scripts/roll_compat_page.py > docs/roll_compatibility.md`; a test checks it -->",
        "",
        "A ROLL YAML loads here unedited when every key it uses is *supported* (same name, same meaning) or an",
        "*alias* (ROLL's spelling, rewritten to roll's before the strict loader). A *refused* key or value fails",
        "with the reason, and says what to set instead.",
        "All problems of a file are reported together, grouped by block.",
        "",
        "## Keys under other names, and refused keys",
        "",
        "| block | ROLL key | status | meaning here / reason |",
        "|---|---|---|---|",
    ]
    for entry in ROLL_KEYS:
        note = entry.note.replace("|", "\\|")  # a literal bar would split the table cell
        lines.append(f"| {entry.block or 'top level'} | `{entry.key}` | {entry.status} | {note} |")
    lines += [
        "",
        "## Reward workers by ROLL's dotted paths",
        "",
        "| ROLL worker_cls | roll class | status |",
        "|---|---|---|",
    ]
    for roll_path, ours in ROLL_REWARD_WORKERS.items():
        exists = importlib.util.find_spec(ours.rpartition(".")[0]) is not None
        lines.append(f"| `{roll_path}` | `{ours}` | {'supported' if exists else 'pending (module not built yet)'} |")
    lines += ["", "## Keys with ROLL's name and meaning (supported)", ""]
    blocks = [
        *((f"top level ({name})", cls) for name, cls in kind_configs().items()),
        ("every role", RewardConfig),
        ("model_args", ModelArgs),
        ("training_args", TrainingArgs),
        ("data_args", DataArgs),
        ("generating_args", GeneratingArgs),
    ]
    for title, cls in blocks:
        names = ", ".join(f"`{f.name}`" for f in dataclasses.fields(cls) if f.init and f.name != "name")
        lines.append(f"- **{title}**: {names}")
    lines += ["", "## Same name, different meaning here", ""]
    lines += [f"- `{key}`: {text}" for key, text in DIFFERENCES + EXAMPLE_DIFFERENCES]
    lines += [
        "",
        "strategy_config keys are checked by `--dry_run` with each engine's own validator (vllm, sglang,",
        "megatron_train/megatron_infer, fsdp2_train/fsdp2_infer); see docs/strategies.md for the key lists.",
    ]
    lines += examples_section(load_results())
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(compatibility_page(), end="")
