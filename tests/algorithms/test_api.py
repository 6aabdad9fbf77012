"""The public API of docs/algorithms.md §10: names importable from `roll.algorithms` with verl's argument names,
orders, defaults."""

import dataclasses
import inspect
import subprocess
import sys

import pytest

import roll.algorithms as algorithms

POLICY_LOSS = (
    "(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode='token-mean', config=None, "
    "rollout_is_weights=None)"
)
OUTCOME = "(token_level_rewards, response_mask, index, epsilon=1e-06, config=None, **kwargs)"

SIGNATURES = {
    "masked_sum": "(values, mask, axis=None)",
    "masked_mean": "(values, mask, axis=None)",
    "masked_var": "(values, mask, unbiased=True)",
    "masked_whiten": "(values, mask, shift_mean=True)",
    "entropy_from_logits": "(logits)",
    "compute_gae_advantage_return": "(token_level_rewards, values, response_mask, gamma, lam)",
    "compute_grpo_outcome_advantage": "(token_level_rewards, response_mask, index, epsilon=1e-06, "
    "norm_adv_by_std_in_grpo=True, config=None)",
    "compute_grpo_vectorized_outcome_advantage": "(token_level_rewards, response_mask, index, epsilon=1e-06, "
    "norm_adv_by_std_in_grpo=True, config=None)",
    "compute_grpo_passk_outcome_advantage": "(token_level_rewards, response_mask, index, epsilon=1e-06, "
    "norm_adv_by_std_in_grpo=True, config=None, **kwargs)",
    "compute_rloo_outcome_advantage": OUTCOME,
    "compute_rloo_vectorized_outcome_advantage": OUTCOME,
    "compute_opo_outcome_advantage": OUTCOME,
    "compute_reinforce_plus_plus_outcome_advantage": "(token_level_rewards, response_mask, config=None, **kwargs)",
    "compute_reinforce_plus_plus_baseline_outcome_advantage": OUTCOME,
    "compute_remax_outcome_advantage": "(token_level_rewards, reward_baselines, response_mask, config=None, **kwargs)",
    "compute_gpg_outcome_advantage": "(token_level_rewards, response_mask, index, epsilon=1e-06, f_norm=1.0, "
    "alpha=1.0, config=None, **kwargs)",
    "compute_optimal_token_baseline_advantage": "(token_level_rewards, response_mask, index, old_log_probs, "
    "sum_pi_squared, rollout_is_weights=None, handle_zero_tail=False, "
    "epsilon=1e-08, config=None, **kwargs)",
    "get_adv_estimator_fn": "(name)",
    # verl's (name), extended with keyword-only requirements
    "register_adv_est": (
        "(name, *, min_group_size=1, forward_passes=(), greedy_baseline=False, needs_critic=False, "
        "step_rows=False, anchor_state_groups=False, agentic_group_of_one=None)"
    ),
    "get_adv_estimator_spec": "(name)",
    "kl_penalty": "(logprob, ref_logprob, kl_penalty)",
    "FixedKLController": "(kl_coef)",
    "AdaptiveKLController": "(init_kl_coef, target_kl, horizon)",
    "get_kl_controller": "(kl_ctrl)",
    "apply_kl_penalty": "(token_level_scores, old_log_probs, ref_log_prob, response_mask, kl_ctrl, kl_penalty='kl')",
    "agg_loss": "(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None, "
    "loss_scale_factor=None)",
    **{
        f"compute_policy_loss_{n}": POLICY_LOSS
        for n in ("vanilla", "gspo", "gpg", "clip_cov", "kl_cov", "geo_mean", "cispo", "sapo")
    },
    "get_policy_loss_fn": "(name)",
    "register_policy_loss": "(name, inputs=())",
    "policy_loss_inputs": "(name)",
    "compute_policy_loss_topr": POLICY_LOSS[:-1] + ", scores=None)",
    "compute_value_loss": "(vpreds, returns, values, response_mask, cliprange_value, loss_agg_mode='token-mean')",
    "compute_entropy_loss": "(logits, response_mask, loss_agg_mode='token-mean')",
    # the SFT / DPO / distillation / OPD maths (docs/algorithms.md §13): the pipelines build on these
    "shift_labels_left": "(labels)",
    "count_loss_tokens": "(batch, loss_mask_keys)",
    "count_valid_samples": "(batch, loss_mask_keys, rows)",
    "global_counts": "(local, all_reduce=None, replicas=1)",
    "mask_prompt_labels": "(input_ids, prompt_length)",
    "sft_collate": "(input_ids, labels, sequence_length, pad_token_id)",
    "language_loss": "(token_losses, labels, batch_num_tokens)",
    "sft_loss": "(logits, labels, batch_num_tokens, metric_name='sft_train/loss@sum')",
    "token_log_probs": "(logits, input_ids, mask)",
    "sequence_log_probs": "(per_token_logps, attention_mask, prompt_id_lens)",
    "split_pairs": "(values)",
    "interleave_pairs": "(chosen, rejected)",
    "dpo_loss": "(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps, "
    "beta=0.1, label_smoothing=0.0, ipo=False)",
    "dpo_metrics": "(loss, chosen_rewards, rejected_rewards, prefix='actor')",
    "get_kd_objective": "(name)",
    "teacher_topk": "(logits, topk, target_vocab_size=None, kd_temperature=1.0, teacher_temperature=1.0)",
    "compute_various_divergence": "(logits, teacher, labels, kd_objective='forward_kl', reduction='mean', *, "
    "kd_temperature=1.0, adaptive_kl_alpha=0.5, skew_lambda=0.1)",
    "distill_loss": "(logits, labels_for_loss, teacher, batch_num_tokens, kd_objective='forward_kl', "
    "distill_loss_weight=0.5, *, kd_temperature=1.0, adaptive_kl_alpha=0.5, skew_lambda=0.1)",
    "distill_val_loss": "(logits, labels_for_loss, batch_num_tokens)",
    "opd_teacher_kl": "(log_probs, teacher_log_probs, response_mask, kl_penalty='kl', kl_coefs=None, row_masks=None)",
    "opd_advantages": "(kl, response_mask, rl_advantages=None, rl_returns=None, *, whiten_advantages=False, "
    "advantage_clip=None)",
}


def bare_signature(obj) -> str:
    """The signature without annotations, e.g. "(values, mask, axis=None)"."""
    sig = inspect.signature(obj)
    return str(
        sig.replace(
            parameters=[p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()],
            return_annotation=inspect.Signature.empty,
        )
    )


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signature(name):
    assert name in algorithms.__all__
    assert bare_signature(getattr(algorithms, name)) == SIGNATURES[name]


def test_adaptive_controller_update_signature():
    assert bare_signature(algorithms.AdaptiveKLController.update) == "(self, current_kl, n_steps)"
    assert bare_signature(algorithms.FixedKLController.update) == "(self, current_kl, n_steps)"


def test_policy_loss_config_fields_and_defaults():
    fields = {f.name: f.default for f in dataclasses.fields(algorithms.PolicyLossConfig)}
    assert fields == {
        "clip_ratio": 0.2,
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.2,
        "clip_ratio_c": 3.0,
        "clip_cov_ratio": 0.0002,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 5.0,
        "kl_cov_ratio": 0.0002,
        "ppo_kl_coef": 0.1,
        "tau_pos": 1.0,
        "tau_neg": 1.05,
        "tis_lower_bound": 0.0,
        "tis_upper_bound": 1.0,
        "kimi15_tau": 0.1,
        "topr_positive_weight": 1.0,
        "topr_negative_weight": 1.0,
        "importance_sampling": "token",
        "global_batch_info": None,
    }


def test_no_ray_or_engine_import():
    code = (
        "import sys, roll.algorithms; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('ray', 'deepspeed', 'vllm', 'transformers')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
