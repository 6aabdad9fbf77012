"""Policy losses (spec §5), registered by the name the YAML's `policy_loss_mode` uses.

Every loss: (old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights)
→ (pg_loss, {"pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"}) with Python-float metrics (0.0 for a key
the loss does not define). IS weights multiply the per-token loss before aggregation.
"""
from dataclasses import dataclass

import torch

from roll.algorithms.aggregation import agg_loss
from roll.algorithms.reductions import masked_mean

__all__ = [
    "PolicyLossConfig", "register_policy_loss", "get_policy_loss_fn", "POLICY_LOSS_REGISTRY",
    "compute_policy_loss_vanilla", "compute_policy_loss_gspo", "compute_policy_loss_gpg",
    "compute_policy_loss_clip_cov", "compute_policy_loss_kl_cov", "compute_policy_loss_geo_mean",
    "compute_policy_loss_cispo", "compute_policy_loss_sapo",
]


@dataclass
class PolicyLossConfig:
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = 0.2
    clip_ratio_high: float | None = 0.2
    clip_ratio_c: float = 3.0  # dual-clip cap for negative advantages; must be > 1
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float | None = 0.1
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    global_batch_info: dict | None = None  # dp_size / batch_num_tokens / global_batch_size / loss_scale_factor


POLICY_LOSS_REGISTRY: dict = {}


def register_policy_loss(name: str):
    def add(fn):
        POLICY_LOSS_REGISTRY[name] = fn
        return fn

    return add


def get_policy_loss_fn(name: str):
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"unknown policy_loss_mode {name!r}; valid: {sorted(POLICY_LOSS_REGISTRY)}")
    return POLICY_LOSS_REGISTRY[name]


def _cfg(config) -> PolicyLossConfig:
    return config if config is not None else PolicyLossConfig()


def _clip_range(config: PolicyLossConfig) -> tuple[float, float]:
    low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    return low, high


def _aggregate(losses, mask, mode, config: PolicyLossConfig):
    return agg_loss(losses, mask, mode, **(config.global_batch_info or {}))


def _weighted(losses, rollout_is_weights):
    return losses if rollout_is_weights is None else losses * rollout_is_weights


def _metrics(clipfrac=0.0, ppo_kl=0.0, clipfrac_lower=0.0) -> dict:
    return {"pg_clipfrac": float(clipfrac), "ppo_kl": float(ppo_kl), "pg_clipfrac_lower": float(clipfrac_lower)}


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                config=None, rollout_is_weights=None):
    config = _cfg(config)
    low, high = _clip_range(config)
    c = config.clip_ratio_c
    if not c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for dual-clip PPO, got {c}")
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, response_mask)
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    clipped = torch.maximum(loss1, loss2)
    clipfrac = masked_mean(torch.gt(loss2, loss1).float(), response_mask)
    loss3 = -advantages * c
    dual = torch.minimum(loss3, clipped)
    clipfrac_lower = masked_mean(torch.gt(clipped, loss3).float() * (advantages < 0).float(), response_mask)
    losses = _weighted(torch.where(advantages < 0, dual, clipped), rollout_is_weights)
    return (_aggregate(losses, response_mask, loss_agg_mode, config),
            _metrics(clipfrac.item(), ppo_kl.item(), clipfrac_lower.item()))


@register_policy_loss("gspo")
def compute_policy_loss_gspo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                             config=None, rollout_is_weights=None):
    config = _cfg(config)
    low, high = _clip_range(config)
    delta = log_prob - old_log_prob
    lengths = response_mask.sum(dim=-1).clamp(min=1)
    seq_log_ratio = (delta * response_mask).sum(dim=-1) / lengths
    token_log_ratio = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(token_log_ratio, max=10.0))
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    losses = _weighted(torch.maximum(loss1, loss2), rollout_is_weights)
    pg_loss = agg_loss(losses, response_mask, "seq-mean-token-mean", **(config.global_batch_info or {}))
    clipfrac = masked_mean(torch.gt(loss2, loss1).float(), response_mask)
    return pg_loss, _metrics(clipfrac.item(), masked_mean(-delta, response_mask).item())


@register_policy_loss("gpg")
def compute_policy_loss_gpg(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                            config=None, rollout_is_weights=None):
    losses = _weighted(-log_prob * advantages, rollout_is_weights)
    return _aggregate(losses, response_mask, loss_agg_mode, _cfg(config)), _metrics()


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                 config=None, rollout_is_weights=None):
    config = _cfg(config)
    low, high = _clip_range(config)
    if not config.clip_cov_ratio > 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {config.clip_cov_ratio}")
    delta = log_prob - old_log_prob
    ratio = torch.exp(delta)
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    valid = response_mask > 0
    already_clipped = torch.gt(loss2, loss1) & valid
    with torch.no_grad():
        cov = (advantages - masked_mean(advantages, response_mask)) * (
            log_prob.detach() - masked_mean(log_prob.detach(), response_mask))
        cov = torch.where(valid & ~already_clipped, cov, torch.full_like(cov, float("-inf")))
        candidates = torch.nonzero(valid & (cov > config.clip_cov_lb) & (cov < config.clip_cov_ub))
        k = max(int(config.clip_cov_ratio * response_mask.sum().item()), 1)
        corr = torch.ones_like(advantages)
        if len(candidates):
            chosen = candidates[torch.randperm(len(candidates))[:min(k, len(candidates))]]
            corr[chosen[:, 0], chosen[:, 1]] = 0
    losses = _weighted(torch.maximum(loss1, loss2) * corr, rollout_is_weights)
    clipfrac = masked_mean((corr == 0).float(), response_mask)
    return (_aggregate(losses, response_mask, loss_agg_mode, config),
            _metrics(clipfrac.item(), masked_mean(-delta, response_mask).item()))


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                               config=None, rollout_is_weights=None):
    config = _cfg(config)
    coef = config.ppo_kl_coef if config.ppo_kl_coef is not None else 1.0
    delta = log_prob - old_log_prob
    ratio = torch.exp(delta)
    loss_plain = -advantages * ratio
    loss_kl = -advantages * ratio + coef * delta.abs()
    losses = loss_plain.clone()
    valid = torch.nonzero(response_mask > 0)
    if len(valid):
        with torch.no_grad():
            adv_v = advantages[valid[:, 0], valid[:, 1]]
            lp_v = log_prob.detach()[valid[:, 0], valid[:, 1]]
            cov = (adv_v - adv_v.mean()) * (lp_v - lp_v.mean())
            k = max(1, int(len(valid) * config.kl_cov_ratio))
            top = valid[torch.topk(cov, min(k, len(cov))).indices]
        losses[top[:, 0], top[:, 1]] = loss_kl[top[:, 0], top[:, 1]]
    losses = _weighted(losses, rollout_is_weights)
    return (_aggregate(losses, response_mask, loss_agg_mode, config),
            _metrics(ppo_kl=masked_mean(delta.abs(), response_mask).item()))


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                                 config=None, rollout_is_weights=None):
    config = _cfg(config)
    low, high = _clip_range(config)
    delta = log_prob - old_log_prob
    sign = torch.sign(advantages)
    delta_clipped = torch.clamp(delta, -low, high)
    delta_star = sign * torch.minimum(sign * delta, sign * delta_clipped)
    lengths = response_mask.sum(dim=-1)
    seq_ratio = torch.exp((delta_star * response_mask).sum(dim=-1) / (lengths + 1e-8))
    seq_adv = (advantages * response_mask).sum(dim=-1) / (lengths + 1e-8)
    seq_loss = -seq_adv * seq_ratio
    if rollout_is_weights is not None:
        seq_w = torch.exp((torch.log(rollout_is_weights + 1e-10) * response_mask).sum(dim=-1) / (lengths + 1e-8))
        seq_loss = seq_loss * seq_w
    clipped = (delta != delta_clipped).float()
    return seq_loss.mean(), _metrics(
        masked_mean(clipped * (advantages > 0).float(), response_mask).item(),
        masked_mean(-delta, response_mask).item(),
        masked_mean(clipped * (advantages < 0).float(), response_mask).item())


@register_policy_loss("cispo")
def compute_policy_loss_cispo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                              config=None, rollout_is_weights=None):
    config = _cfg(config)
    low, high = _clip_range(config)
    log_ratio = torch.clamp(log_prob - old_log_prob, -20.0, 20.0)
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1 - low, 1 + high).detach()
    losses = _weighted(-clipped_ratio * advantages * log_prob, rollout_is_weights)
    clipfrac = masked_mean((ratio != clipped_ratio).float(), response_mask)
    return (_aggregate(losses, response_mask, loss_agg_mode, config),
            _metrics(clipfrac.item(), masked_mean(-log_ratio, response_mask).item()))


@register_policy_loss("sapo")
def compute_policy_loss_sapo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
                             config=None, rollout_is_weights=None):
    config = _cfg(config)
    log_ratio = torch.clamp(log_prob - old_log_prob, -20.0, 20.0)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, torch.full_like(ratio, config.tau_pos), torch.full_like(ratio, config.tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    losses = _weighted(-gate * advantages, rollout_is_weights)
    pg_loss = agg_loss(losses, response_mask, "seq-mean-token-mean", **(config.global_batch_info or {}))
    return pg_loss, _metrics(ppo_kl=masked_mean(-log_ratio, response_mask).item())
