"""Driver-side maths of one step: KL-in-reward, rollout IS, advantages (all from `roll.algorithms`; on-policy
distillation's from roll.pipeline.core.opd)."""

import inspect

import torch
from omegaconf import OmegaConf

from roll.algorithms import (
    apply_kl_penalty,
    compute_mismatch_metrics,
    compute_rollout_importance_weights,
    get_adv_estimator_fn,
    reward_norm,
    sample_level_mask,
    sample_loss_weights,
    shape_advantages,
    train_infer_correction,
    whiten_token_rewards,
)
from roll.distributed.data_proto import DataProto
from roll.pipeline.core.opd import opd_step
from roll.utils.functional import scores_on_last_token


def _shaping_on(config, *keys) -> bool:
    return any(getattr(config, key, None) not in (None, False) for key in keys)


_MASK_KEYS = ("max_len_mask", "difficulty_mask", "error_max_len_clip")
_SCORE_KEYS = ("norm_mean_type", "norm_std_type", "use_reward_scaling", "reward_clip")
_WEIGHT_KEYS = ("difficulty_loss_weight", "length_loss_weight")
_WEIGHTS = "sample_loss_weights"  # apply_reward_shaping → compute_advantages


def apply_reward_shaping(batch: DataProto, config) -> dict:
    """ROLL's sample masks, score normalisation/clip (docs/algorithms.md §11), before the token rewards are
    built; with every key off the batch is untouched. Masked samples leave `response_mask` (the loss mask); the
    loss weights are computed here, before that, and taken by `compute_advantages`."""
    data, metrics = batch.batch, {}
    if not _shaping_on(config, *_MASK_KEYS, *_SCORE_KEYS, *_WEIGHT_KEYS):
        return metrics
    mask, scores = data["response_mask"], data["scores"]
    lengths, index = mask.sum(-1), batch.non_tensor_batch["uid"]
    if _shaping_on(config, *_WEIGHT_KEYS):
        # from the lengths before the sample masks, as ROLL (compute_sample_weights reads response_mask, not
        # final_response_mask): a dropped row must not count as length 0 in the kept rows' weights
        data[_WEIGHTS] = sample_loss_weights(
            lengths,
            batch.non_tensor_batch.get("difficulty"),
            difficulty_loss_weight=config.difficulty_loss_weight,
            length_loss_weight=config.length_loss_weight,
        )
    if _shaping_on(config, *_MASK_KEYS):
        keep = sample_level_mask(
            scores,
            lengths,
            mask.shape[-1],
            index,
            max_len_mask=config.max_len_mask,
            difficulty_mask=config.difficulty_mask,
            difficulty_low_threshold=config.difficulty_low_threshold,
            difficulty_high_threshold=config.difficulty_high_threshold,
            error_max_len_clip=config.error_max_len_clip,
            error_max_len_threshold=config.error_max_len_threshold,
        )
        data["response_mask"] = mask * keep.unsqueeze(-1).to(mask.dtype)
        metrics["shaping/samples_used"] = float(keep.sum())
        metrics["shaping/final_mask_ratio"] = float(keep.mean())
    if _shaping_on(config, *_SCORE_KEYS):
        # the scores as placed so far (agentic: after reward_normalization), one per row
        placed = data["token_level_scores"].sum(-1)
        shaped = reward_norm(placed, index, config.norm_mean_type, config.norm_std_type)
        if config.use_reward_scaling:  # a constant batch gives 0, not x/1e-6
            shaped = reward_norm(shaped, index, None, "batch")
        if config.reward_clip is not None:
            metrics["shaping/reward_clip_frac"] = float((shaped.abs() > config.reward_clip).float().mean())
            shaped = shaped.clamp(-config.reward_clip, config.reward_clip)
        # the shaped score replaces the raw one on the last response token
        data["token_level_scores"] = scores_on_last_token(shaped, mask)
    return metrics


def apply_reward_kl(batch: DataProto, config, kl_ctrl) -> dict:
    """token_level_rewards = scores − β·KL(old‖ref) when `add_token_level_kl`, else the scores."""
    scores = batch.batch["token_level_scores"]
    if not config.add_token_level_kl:
        batch.batch["token_level_rewards"] = scores.clone()
        return {}
    rewards, metrics = apply_kl_penalty(
        scores,
        batch.batch["old_log_probs"],
        batch.batch["ref_log_probs"],
        batch.batch["response_mask"],
        kl_ctrl,
        kl_penalty=config.kl_penalty,
    )
    batch.batch["token_level_rewards"] = rewards
    return metrics


def apply_rollout_is(batch: DataProto, config) -> dict:
    """Mismatch metrics whenever rollout log-probs and recomputed old ones exist (not where the old-log-prob pass
    was skipped: roll.pipeline.core.old_log_probs); IS weights when `rollout_is_threshold` is set."""
    if "rollout_log_probs" not in batch.batch or "old_log_probs" not in batch.batch:
        return {}
    old, rollout, mask = (batch.batch[k] for k in ("old_log_probs", "rollout_log_probs", "response_mask"))
    metrics = {f"mismatch/{k}": v for k, v in compute_mismatch_metrics(old, rollout, mask).items()}
    if "policy_lag" in batch.non_tensor_batch:  # async rollout: the same metrics per policy-version lag
        lags = batch.non_tensor_batch["policy_lag"].astype(int)
        for lag in sorted(set(lags.tolist())):
            rows = torch.from_numpy(lags == lag)
            part = compute_mismatch_metrics(old[rows], rollout[rows], mask[rows])
            metrics.update({f"mismatch/lag_{lag}/{k}": v for k, v in part.items()})
    if config.rollout_is_threshold is None:
        return metrics
    weights, is_metrics = compute_rollout_importance_weights(
        old,
        rollout,
        mask,
        rollout_is_level=config.rollout_is_level,
        rollout_is_mode=config.rollout_is_mode,
        rollout_is_threshold=config.rollout_is_threshold,
        rollout_is_threshold_lower=config.rollout_is_threshold_lower,
        rollout_is_veto_threshold=config.rollout_is_veto_threshold,
    )
    metrics.update(is_metrics)
    if config.rollout_is:
        batch.batch["rollout_is_weights"] = weights
    return metrics


def apply_train_infer_correction(batch: DataProto, config) -> dict:
    """ROLL's train_infer_correction, after the advantages (as ROLL's pipelines): the enabled filters drop tokens
    from `response_mask` (the loss mask), the IS weight becomes `rollout_is_weights` (which every policy loss
    multiplies in per token)."""
    cfg = config.train_infer_correction
    if "rollout_log_probs" not in batch.batch or not (cfg.active or cfg.filters):
        return {}
    data = batch.batch
    weights, keep, metrics = train_infer_correction(
        data["old_log_probs"], data["rollout_log_probs"], data["response_mask"], cfg
    )
    if weights is not None:
        data["rollout_is_weights"] = weights.to(data["old_log_probs"].dtype)
    if any(f.enabled for f in cfg.filters):
        data["response_mask"] = data["response_mask"] * keep.to(data["response_mask"].dtype)
    return metrics


def compute_advantages(batch: DataProto, config) -> dict:
    """Adds `advantages` and `returns`; estimator arguments follow verl's `compute_advantage` dispatch. With
    on-policy distillation the teachers' KL enters here (roll.pipeline.core.opd): pure mode runs no estimator,
    mixed mode subtracts it from the estimator's advantages before whitening and clip. Returns its metrics."""
    if config.opd_mode == "pure":
        advantages, returns, metrics = opd_step(batch, config)
    else:
        advantages, returns, metrics = _estimator_advantages(batch, config)
    data = batch.batch
    if _shaping_on(config, *_WEIGHT_KEYS):
        # a positive per-sample factor on A scales the clipped surrogate exactly (docs/algorithms.md §11.3)
        if _WEIGHTS not in data:
            raise ValueError("difficulty/length_loss_weight: run apply_reward_shaping before compute_advantages")
        weights = data.pop(_WEIGHTS)  # driver-side only: the workers never see it
        advantages = advantages * weights.unsqueeze(-1).to(advantages.dtype)
    data["advantages"], data["returns"] = advantages, returns
    return metrics


def _estimator_advantages(batch: DataProto, config) -> tuple:
    """The RL estimator's (advantages, returns, metrics), whitened and clipped; with use_opd minus the teachers'
    KL before that."""
    name = config.adv_estimator
    fn = get_adv_estimator_fn(name)
    data = batch.batch
    available = {
        "token_level_rewards": data["token_level_rewards"],
        "response_mask": data["response_mask"],
        "values": data.get("values"),
        "gamma": config.gamma,
        "lam": config.lambd,
        "index": batch.non_tensor_batch["uid"],
        "norm_adv_by_std_in_grpo": config.norm_adv_by_std_in_grpo,
        "reward_baselines": data.get("reward_baselines"),
        "old_log_probs": data.get("old_log_probs"),
        "sum_pi_squared": data.get("sum_pi_squared"),
        "rollout_is_weights": data.get("rollout_is_weights"),
        "config": OmegaConf.create(
            {"gamma": config.gamma, "lam": config.lambd, "norm_adv_by_std_in_grpo": config.norm_adv_by_std_in_grpo}
        ),
    }
    params = inspect.signature(fn).parameters
    required = [
        p
        for p, spec in params.items()
        if spec.default is inspect.Parameter.empty and spec.kind not in (spec.VAR_KEYWORD, spec.VAR_POSITIONAL)
    ]
    missing = [p for p in required if available.get(p) is None]
    if missing:
        raise ValueError(
            f"adv_estimator={name!r} needs {missing}, which this pipeline step did not produce "
            f"(gae needs a critic role)"
        )
    kwargs = {p: available[p] for p in params if p in available and available[p] is not None}
    if config.whiten_rewards:
        kwargs["token_level_rewards"] = whiten_token_rewards(kwargs["token_level_rewards"], data["response_mask"])
    advantages, returns = fn(**kwargs)
    if config.opd_mode == "mixed":
        return opd_step(batch, config, advantages, returns)
    if config.whiten_advantages or config.advantage_clip is not None:
        advantages = shape_advantages(
            advantages,
            data["response_mask"],
            whiten_advantages=config.whiten_advantages,
            advantage_clip=config.advantage_clip,
        )
    return advantages, returns, {}
