"""Fields every policy-optimisation pipeline (RLVR, agentic) shares: the model roles and the RL maths.

ROLL's key names, verl's defaults for the maths. Every estimator, policy loss, aggregation mode, KL
option and the rollout-IS framework of `roll.algorithms` is selected here by name;
`roll.configs.policy_loss_config` maps the ROLL-style clip keys onto `PolicyLossConfig`.
"""

from dataclasses import dataclass
from typing import ClassVar, Literal

from roll.configs.loader import field_help
from roll.configs.opd import TeacherConfig, name_teachers, opd_notes, teacher_keys, teacher_specs
from roll.configs.roles import ACTOR_INFER, ACTOR_TRAIN, CRITIC, REFERENCE
from roll.configs.rollout import RolloutConfig
from roll.configs.train_infer import TrainInferCorrectionConfig
from roll.configs.worker import WorkerConfig

LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


@dataclass
class RLAlgorithmConfig(RolloutConfig):
    ROLES = (ACTOR_TRAIN, ACTOR_INFER, REFERENCE, CRITIC)
    EPOCHS_ROLE = "actor_train"
    ROLL_DATA_BLOCKS = ("actor_train", "validation")
    # what changes what a step is, besides the seed and the trained roles' layout (fingerprint)
    FINGERPRINT_KEYS: ClassVar[tuple[str, ...]] = ("rollout_batch_size", "adv_estimator")

    # --- roles --------------------------------------------------------------------------------
    actor_train: WorkerConfig | None = field_help(None, "the policy being trained (a training strategy)")
    actor_infer: WorkerConfig | None = field_help(None, "the rollout engine (hf_infer, vllm, sglang)")
    reference: WorkerConfig | None = field_help(
        None, "frozen reference policy for KL (needed by use_kl_loss or add_token_level_kl)"
    )
    critic: WorkerConfig | None = field_help(None, "value model; required by adv_estimator: gae, unused otherwise")
    # --- batch shape ----------------------------------------------------------------------------
    prompt_length: int = field_help(256, "maximum prompt tokens (left-padded to this)", bounds="[1, inf)")
    response_length: int = field_help(256, "maximum response tokens (right-padded to this)", bounds="[1, inf)")
    ppo_epochs: int = field_help(
        1, "passes over each step's samples, one optimizer step per mini-batch", bounds="[1, inf)"
    )

    # --- advantages ---------------------------------------------------------------------------------
    adv_estimator: str = field_help(
        "grpo",
        "advantage estimator registered in roll.algorithms: gae, grpo, grpo_vectorized, grpo_passk, rloo, "
        "rloo_vectorized, opo, reinforce_plus_plus, reinforce_plus_plus_baseline, remax, gpg, ...",
    )
    gamma: float = field_help(1.0, "discount (GAE, REINFORCE++)", bounds="[0, 1]")
    lambd: float = field_help(1.0, "GAE lambda", bounds="[0, 1]")
    norm_adv_by_std_in_grpo: bool = field_help(True, "divide GRPO advantages by the group std (false = Dr.GRPO)")

    # ROLL reward/advantage shaping (docs/algorithms.md §11; all off by default)
    max_len_mask: bool = field_help(False, "drop truncated samples (length = response_length) from the loss")
    difficulty_mask: bool = field_help(
        False, "drop a prompt's samples from the loss unless low < its mean score < high (both strict)"
    )
    difficulty_low_threshold: float = field_help(
        0.0, "difficulty_mask: lower bound of the group mean score", bounds="(-inf, inf)"
    )
    difficulty_high_threshold: float = field_help(
        1.0, "difficulty_mask: upper bound of the group mean score", bounds="(-inf, inf)"
    )
    error_max_len_clip: bool = field_help(
        False, "drop samples with score ≤ 0 that are at least error_max_len_threshold tokens long"
    )
    error_max_len_threshold: int = field_help(
        9999999999, "error_max_len_clip: length limit of failed samples", bounds="[0, inf)"
    )
    difficulty_loss_weight: bool = field_help(
        False, "weight each sample's loss by 0.5 + 1.5·difficulty (dataset column 'difficulty' in [0, 1])"
    )
    length_loss_weight: bool = field_help(False, "weight each sample's loss by 1.5 − its min-max scaled length")
    norm_mean_type: Literal["batch", "group"] | None = field_help(
        None, "subtract the score mean of the batch or of the prompt group; null = no shift"
    )
    norm_std_type: Literal["batch", "group"] | None = field_help(
        None, "divide scores by the (unbiased) std of the batch or the prompt group; null = no scaling"
    )
    use_reward_scaling: bool = field_help(False, "divide scores by their batch std (no shift), after norm_*")
    reward_clip: float | None = field_help(
        None, "clamp sample scores to ±reward_clip after normalisation", bounds="(0, inf)"
    )
    whiten_rewards: bool = field_help(False, "whiten token rewards over the batch's valid tokens")
    whiten_advantages: bool = field_help(False, "whiten advantages over the batch's valid tokens")
    advantage_clip: float | None = field_help(
        None, "clamp advantages to ±advantage_clip after whitening", bounds="(0, inf)"
    )
    use_pg_clip_range: bool | None = field_help(
        None,
        "true: clip ratio to [1 − pg_clip_low, 1 + pg_clip_high] (ROLL); false: [1 − pg_clip, 1 + pg_clip] even "
        "if pg_clip_low/high are set (ROLL); null: each of pg_clip_low/high applies when set (verl)",
    )

    pg_variant: Literal["ppo", "tis", "topr", "cispo", "kimi15"] | None = field_help(
        None,
        "ROLL's actor loss name; when set it selects policy_loss_mode: ppo → vanilla, tis → tis, topr → topr, "
        "cispo → cispo, kimi15 → kimi15 (docs/algorithms.md §11.7); null = policy_loss_mode decides. ROLL's "
        "spelling actor_train.pg_variant is taken too",
    )
    importance_sampling: Literal["token", "seq"] = field_help(
        "token",
        "ratio of the PPO loss (policy_loss_mode vanilla / pg_variant ppo): token = per token; seq = one ratio "
        "per sample, exp(mean of the token log-ratios) (ROLL; docs/algorithms.md §11.7)",
    )
    topr_positive_weight: float = field_help(
        1.0, "pg_variant topr: weight of the samples with score > 0", bounds="(-inf, inf)"
    )
    topr_negative_weight: float = field_help(
        1.0, "pg_variant topr: weight of the samples with score ≤ 0", bounds="(-inf, inf)"
    )
    tis_lower_bound: float = field_help(
        0.0, "pg_variant tis: lower bound of the truncated ratio weight", bounds="[0, inf)"
    )
    tis_upper_bound: float = field_help(
        1.0, "pg_variant tis: upper bound of the truncated ratio weight", bounds="(0, inf)"
    )
    kimi15_tau: float = field_help(
        0.1, "pg_variant kimi15: weight τ of the ½(log π − log π_old)² term", bounds="[0, inf)"
    )
    # --- policy loss --------------------------------------------------------------------------------
    policy_loss_mode: str = field_help(
        "vanilla",
        "policy loss registered in roll.algorithms: vanilla, gspo, gpg, clip_cov, kl_cov, geo_mean, cispo, sapo",
    )
    loss_agg_mode: LossAggMode = field_help("token-mean", "how token losses become one loss")
    pg_clip: float = field_help(0.2, "PPO ratio clip ε", bounds="[0, inf)")
    pg_clip_low: float | None = field_help(None, "lower clip ε (1 − ε_low); null means pg_clip", bounds="[0, inf)")
    pg_clip_high: float | None = field_help(None, "upper clip ε (1 + ε_high); null means pg_clip", bounds="[0, inf)")
    dual_clip_loss: bool = field_help(
        True,
        "dual-clip PPO: cap the loss of negative-advantage tokens at dual_clip_ratio_c × |A| (verl always does this)",
    )
    dual_clip_ratio_c: float = field_help(3.0, "the dual-clip constant c (> 1)", bounds="(1, inf)")
    clip_cov_ratio: float = field_help(0.0002, "clip_cov: fraction of tokens clipped", bounds="[0, 1]")
    clip_cov_lb: float = field_help(1.0, "clip_cov: covariance lower bound", bounds="(-inf, inf)")
    clip_cov_ub: float = field_help(5.0, "clip_cov: covariance upper bound", bounds="(-inf, inf)")
    kl_cov_ratio: float = field_help(0.0002, "kl_cov: fraction of tokens penalised", bounds="[0, 1]")
    ppo_kl_coef: float = field_help(0.1, "kl_cov: KL coefficient", bounds="[0, inf)")
    tau_pos: float = field_help(1.0, "sapo: temperature for positive advantages", bounds="(0, inf)")
    tau_neg: float = field_help(1.05, "sapo: temperature for negative advantages", bounds="(0, inf)")
    entropy_loss_coef: float = field_help(0.0, "entropy bonus coefficient (0 = off)", bounds="(-inf, inf)")
    rl_loss_coef: float = field_help(
        1.0,
        "factor on the policy loss plus the KL loss (not on the entropy bonus), as ROLL's RLVR actor: "
        "loss = rl_loss_coef·(pg + kl_loss_coef·kl) − entropy_loss_coef·entropy",
        bounds="(-inf, inf)",
    )
    value_clip: float | None = field_help(
        0.5, "critic value clip range (GAE); null = no clipping (ROLL's meaning)", bounds="(0, inf)"
    )

    # --- KL ---------------------------------------------------------------------------------------------
    use_kl_loss: bool = field_help(False, "add kl_loss_coef × KL(actor‖reference) to the policy loss")
    kl_loss_coef: float = field_help(0.001, "KL-loss coefficient", bounds="[0, inf)")
    kl_loss_type: str = field_help(
        "low_var_kl",
        "KL estimator of the KL loss: kl/k1, abs, mse/k2, low_var_kl/k3, or one of them + '+' "
        "(value of that estimator, gradient of k2)",
    )
    add_token_level_kl: bool = field_help(False, "subtract β × KL(old‖reference) from the token rewards")
    kl_penalty: str = field_help("kl", "KL estimator of the in-reward penalty (same names as kl_loss_type)")
    init_kl_coef: float = field_help(
        0.001, "β of the in-reward KL penalty (initial value when adaptive)", bounds="[0, inf)"
    )
    target_kl: float | None = field_help(None, "adaptive KL controller target; null = fixed β", bounds="(0, inf)")
    kl_horizon: int = field_help(10000, "adaptive KL controller horizon", bounds="[1, inf)")

    # --- rollout importance sampling (docs/rollout_correction.md §7.1) -----------------------------------
    rollout_is_threshold: float | None = field_help(
        None,
        "upper IS-weight threshold U; null turns rollout IS off (mismatch metrics are still logged)",
        bounds="(0, inf)",
    )
    rollout_is: bool = field_help(False, "apply the IS weights in the policy loss (false: metrics only)")
    rollout_is_threshold_lower: float | None = field_help(None, "lower threshold L; null means 1/U", bounds="(0, inf)")
    rollout_is_level: Literal["token", "sequence", "geometric"] = field_help("token", "IS ratio granularity")
    rollout_is_mode: Literal["truncate", "clip", "mask"] = field_help(
        "truncate", "truncate: cap weights at U; clip/mask: zero weights outside [L, U]"
    )
    rollout_is_veto_threshold: float | None = field_help(
        1e-4, "a token with ratio below this vetoes its whole sequence; null = no veto", bounds="(0, inf)"
    )
    use_rollout_log_probs: bool | None = field_help(
        None,
        "old log-probs from the rollout engine (its log-probs of the sampled tokens) instead of an actor_train "
        "pass (verl's key). null: where shown exact (hf_infer + an HF-module trainer, float32 both, no sampling "
        "filters, verified weight sync, on-policy rows, measured equal on the first step) the pass is skipped; "
        "true: always (opt-in for close engines: vLLM, SGLang); false: always recompute "
        "(docs/rollout_correction.md, Old log-probs)",
    )
    train_infer_correction: TrainInferCorrectionConfig = field_help(
        default_factory=TrainInferCorrectionConfig,
        help="ROLL's train-infer mismatch filters (tokens dropped from the loss) and IS weight (docs/"
        "rollout_correction.md §7.7); needs an actor_infer that returns rollout log-probs; the IS weight excludes "
        "rollout_is",
    )

    # --- on-policy distillation (roll.configs.opd; docs/algorithms.md §13.5) -------------------------------------
    use_opd: bool = field_help(
        False,
        "mixed on-policy distillation (ROLL's key): the advantages are the RL estimator's minus Σ over the teachers "
        "of opd_kl_coef × KL(student ‖ teacher) per response token (kl_penalty's estimator of the student's old "
        "log-probs against the teacher's), then whitening / mask / clip; an advantage term, not discounted and not "
        "in the returns. Needs `teacher`",
    )
    teacher: TeacherConfig | dict[str, TeacherConfig] | None = field_help(
        None,
        "on-policy distillation's teacher(s): one role (role name teacher) or a mapping name → role (roles "
        "teacher.<name>), each scoring the student's tokens as the reference does, with its opd_kl_coef and "
        "tag_included; same tokenizer as the student",
    )

    def __post_init__(self):
        super().__post_init__()
        name_teachers(self)

    @property
    def opd_mode(self) -> str | None:
        """On-policy distillation: "mixed" (use_opd), "pure" (a kind whose advantages are the teachers' KL alone),
        or None (off)."""
        return "mixed" if self.use_opd else None

    def opd_routing(self) -> tuple[str, dict[str, set]]:
        """(the rows' routing column, group → its tags) for teacher routing (roll.configs.opd.routes)."""
        raise NotImplementedError(f"{type(self).__name__}.opd_routing")

    def extra_model_roles(self) -> dict:
        return teacher_specs(self)

    # ---- the kind interface's shared part for the policy-optimisation kinds (roll/configs/base.py) ----------
    @property
    def ratio_level(self) -> str:
        """The PPO ratio's level the loss computes: importance_sampling's (token | seq); a kind may add one."""
        return self.importance_sampling

    def longest_row(self) -> tuple[int, str]:
        return self.prompt_length + self.response_length, "prompt_length + response_length"

    def fingerprint(self) -> dict:
        roles = super().fingerprint()
        out = {"seed": roles.pop("seed"), **{key: getattr(self, key) for key in self.FINGERPRINT_KEYS}, **roles}
        out["critic"] = "configured" if self.critic is not None else "none"
        if self.opd_mode is not None:  # absent otherwise: checkpoints of runs without teachers keep their fingerprint
            out["opd"] = f"{self.opd_mode}: {', '.join(self.extra_model_roles())}"
        return out

    def resolved(self) -> dict:
        from roll.configs.policy_loss import effective_policy_loss_mode

        resolved = super().resolved()
        resolved["policy_loss_mode"] = effective_policy_loss_mode(self)  # the loss the run uses: pg_variant names it
        return resolved

    def describe_notes(self) -> list[str]:
        notes = [*self.loss_notes(), *opd_notes(self)]
        from roll.configs.rl_checks import describe_reference

        reference = describe_reference(self)
        if reference:
            notes.append(reference)
        if self.reference is not None and not (self.use_kl_loss or self.add_token_level_kl):
            notes.append(
                "note: 'reference' is configured but use_kl_loss and add_token_level_kl are both off, so nothing "
                "reads its log-probs: it will not be started"
            )
        return notes

    def loss_notes(self) -> list[str]:
        if self.pg_variant is None:
            return []
        from roll.configs.policy_loss import effective_policy_loss_mode

        loss = effective_policy_loss_mode(self)
        return [f"policy loss: {loss} (from pg_variant: {self.pg_variant}, which overrides policy_loss_mode)"]

    @classmethod
    def roll_translate(cls, data: dict, problems: list, first: bool) -> None:
        """ROLL's LoRA keys repeated on the rollout roles, and its trl value-head critic."""
        if not first:
            from roll.configs.roll_compat import example_keys
            from roll.configs.roll_compat.translate import drop_lora_copies

            drop_lora_copies(data)
            example_keys.critic_value_head(data)

    @classmethod
    def roll_blocks(cls, data: dict) -> list:
        """The teacher blocks take ROLL's role aliases (sequence_packing_args, ...)."""
        teacher = data.get("teacher")
        if not isinstance(teacher, dict):
            return []
        if teacher_keys(teacher):  # one role
            return [("<role>", "teacher", teacher)]
        return [("<role>", f"teacher.{name}", block) for name, block in teacher.items() if isinstance(block, dict)]

    def check_roll_keys(self, extra: dict) -> list:
        from roll.configs.roll_compat import check_roll_keys

        return check_roll_keys(self, extra)
