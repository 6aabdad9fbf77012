"""Policy losses (docs/algorithms.md §5), registered by the name the YAML's `policy_loss_mode` uses.

Every loss: (old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights)
→ (pg_loss, {"pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"}) with Python-float metrics (0.0 for a key
the loss does not define). IS weights multiply the per-token loss before aggregation. A loss that needs more
of the batch declares it (`register_policy_loss(name, inputs=("scores",))`; `policy_loss_inputs(name)`) and
gets those per-sample tensors as keyword arguments.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from roll.algorithms.aggregation import agg_loss
from roll.algorithms.reductions import masked_mean, masked_sum

__all__ = [
    "PolicyLossConfig",
    "RATIO_LEVELS",
    "segment_mean",
    "register_policy_loss",
    "get_policy_loss_fn",
    "policy_loss_inputs",
    "POLICY_LOSS_REGISTRY",
    "compute_policy_loss_vanilla",
    "compute_policy_loss_gspo",
    "compute_policy_loss_gpg",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_cispo",
    "compute_policy_loss_sapo",
    "compute_policy_loss_tis",
    "compute_policy_loss_kimi15",
    "compute_policy_loss_topr",
]


@dataclass
class PolicyLossConfig:
    """Options the policy losses read (verl's actor / actor.policy_loss keys; defaults: docs/algorithms.md §8).

    The pipeline builds it from its ROLL-style keys in `roll.configs.policy_loss_config`. A loss also
    accepts a mapping or any object with these attributes (verl's ActorConfig, where the clip-cov / kl-cov
    keys sit under `policy_loss`); a missing key takes the default below.
    """

    clip_ratio: float = 0.2
    clip_ratio_low: float | None = 0.2  # None → clip_ratio
    clip_ratio_high: float | None = 0.2  # None → clip_ratio
    clip_ratio_c: float = 3.0  # dual-clip cap for negative advantages; must be > 1
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float | None = 0.1  # None → 1.0 (verl's code fallback)
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    tis_lower_bound: float = 0.0  # tis: the ratio weight is clip(r, lower, upper), a constant
    tis_upper_bound: float = 1.0
    kimi15_tau: float = 0.1  # kimi15: weight of the ½(log π − log π_old)² proximity term
    topr_positive_weight: float = 1.0  # topr: weight of the samples with score > 0
    topr_negative_weight: float = 1.0  # topr: weight of the samples with score ≤ 0
    # vanilla: the ratio's level, a RATIO_LEVELS key: "token" per token; "seq" one ratio per sequence,
    # exp(masked mean of log ρ) (ROLL's importance_sampling); "segment" one per turn (ROLL's agentic ratio_type)
    importance_sampling: str = "token"
    # dp_size / batch_num_tokens / global_batch_size / loss_scale_factor for agg_loss; None → local formulas
    global_batch_info: dict | None = None


POLICY_LOSS_REGISTRY: dict = {}
_LOSS_INPUTS: dict = {}  # name → the extra batch keys the loss takes as keyword arguments
_DEFAULTS = PolicyLossConfig()
_MISSING = object()
_GLOBAL_BATCH_KEYS = ("dp_size", "batch_num_tokens", "global_batch_size", "loss_scale_factor")


def register_policy_loss(name: str, inputs: tuple = ()):
    def add(fn):
        # a second function under one name would silently change what a YAML's policy_loss_mode means
        if name in POLICY_LOSS_REGISTRY and POLICY_LOSS_REGISTRY[name] is not fn:
            raise ValueError(f"policy loss {name!r} is already registered; pick another name")
        POLICY_LOSS_REGISTRY[name] = fn
        _LOSS_INPUTS[name] = tuple(inputs)
        return fn

    return add


def get_policy_loss_fn(name: str):
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"unknown policy_loss_mode {name!r}; valid: {sorted(POLICY_LOSS_REGISTRY)}")
    return POLICY_LOSS_REGISTRY[name]


def policy_loss_inputs(name: str) -> tuple:
    """The batch keys (beyond verl's arguments) the loss `name` reads, e.g. ("scores",) for topr."""
    get_policy_loss_fn(name)
    return _LOSS_INPUTS[name]


def _lookup(config, key):
    if isinstance(config, Mapping):
        return config.get(key, _MISSING)
    return getattr(config, key, _MISSING)


def _option(config, key):
    """config.key (or config.policy_loss.key, verl's nesting); missing → PolicyLossConfig default.
    An explicit None is returned as None: some options give None a meaning."""
    if config is None:
        return getattr(_DEFAULTS, key)
    value = _lookup(config, key)
    if value is _MISSING:
        nested = _lookup(config, "policy_loss")
        if nested is not _MISSING and nested is not None:
            value = _lookup(nested, key)
    return getattr(_DEFAULTS, key) if value is _MISSING else value


def _clip_range(config) -> tuple[float, float]:
    low, high = _option(config, "clip_ratio_low"), _option(config, "clip_ratio_high")
    clip_ratio = _option(config, "clip_ratio")
    return (clip_ratio if low is None else low), (clip_ratio if high is None else high)


def _global_batch_info(config) -> dict:
    info = dict(_option(config, "global_batch_info") or {})
    unknown = sorted(set(info) - set(_GLOBAL_BATCH_KEYS))
    if unknown:
        raise ValueError(f"global_batch_info has unknown keys {unknown}; valid: {list(_GLOBAL_BATCH_KEYS)}")
    return info


def _aggregate(losses, mask, mode, config):
    return agg_loss(losses, mask, mode, **_global_batch_info(config))


def _weighted(losses, rollout_is_weights):
    # IS weights are constants for the loss (computed under no_grad upstream; detached here to be sure).
    return losses if rollout_is_weights is None else losses * rollout_is_weights.detach()


def _metrics(clipfrac=0.0, ppo_kl=0.0, clipfrac_lower=0.0) -> dict:
    return {"pg_clipfrac": float(clipfrac), "ppo_kl": float(ppo_kl), "pg_clipfrac_lower": float(clipfrac_lower)}


def _ppo_clip(advantages, ratio, low, high):
    """(−A·r, −A·clip(r, 1−ε_low, 1+ε_high), their max, [clip branch strictly larger])."""
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    return loss1, loss2, torch.maximum(loss1, loss2), torch.gt(loss2, loss1)


def _clamped_log_ratio(old_log_prob, log_prob):
    # ±20 keeps exp() finite; the clamp also zeroes the gradient of outliers.
    return torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)


def segment_mean(values, mask):
    """Per row, every maximal run of valid positions (a turn of a multi-turn response) gets the mean of
    `values` over the run, Σ/(n + 1e-8) as ROLL's `compute_segment_masked_mean`; 0 off the mask.
    Differentiable: each position's gradient is spread over its run."""
    valid = mask > 0
    starts = valid & ~torch.nn.functional.pad(valid[:, :-1], (1, 0), value=False)
    segment = torch.cumsum(starts.long(), dim=-1) * valid  # 1, 2, … per run; 0 off the mask
    width = mask.shape[-1] + 1
    sums = values.new_zeros(mask.shape[0], width).scatter_add(1, segment, values * valid)
    counts = values.new_zeros(mask.shape[0], width).scatter_add(1, segment, valid.to(values.dtype))
    return (sums / (counts + 1e-8)).gather(1, segment) * valid


def _row_mean(values, mask):
    return (masked_sum(values, mask, axis=-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1).expand_as(values)


# the PPO ratio's level (PolicyLossConfig.importance_sampling): log-ratio (B, T), mask → ratio (B, T)
RATIO_LEVELS = {
    "token": lambda log_ratio, mask: torch.exp(log_ratio),
    # one ratio per row: exp of the masked mean log-ratio; gradient flows through the mean
    "seq": lambda log_ratio, mask: torch.exp(_row_mean(log_ratio, mask)),
    # one ratio per turn: exp of the turn's mean log-ratio (1 off the mask)
    "segment": lambda log_ratio, mask: torch.exp(segment_mean(log_ratio, mask)),
}


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """Dual-clip PPO: the clipped surrogate, and for A < 0 a cap of c·|A| on the loss."""
    low, high = _clip_range(config)
    c = _option(config, "clip_ratio_c")
    if not c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for dual-clip PPO, got {c}")
    log_ratio = _clamped_log_ratio(old_log_prob, log_prob)
    level = _option(config, "importance_sampling")
    if level not in RATIO_LEVELS:
        raise ValueError(f"importance_sampling must be one of {list(RATIO_LEVELS)}, got {level!r}")
    ratio = RATIO_LEVELS[level](log_ratio, response_mask)
    _, _, clipped, clip_used = _ppo_clip(advantages, ratio, low, high)
    cap = -advantages * c
    capped = torch.gt(clipped, cap) & (advantages < 0)
    losses = torch.where(advantages < 0, torch.minimum(cap, clipped), clipped)
    pg_loss = _aggregate(_weighted(losses, rollout_is_weights), response_mask, loss_agg_mode, config)
    return pg_loss, _metrics(
        masked_mean(clip_used.float(), response_mask).item(),
        masked_mean(-log_ratio, response_mask).item(),
        masked_mean(capped.float(), response_mask).item(),
    )


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """Sequence-level ratio s_i = exp(mean valid log-ratio) on every token, with per-token gradient s_i.
    Always aggregated as seq-mean-token-mean (`loss_agg_mode` is ignored, as in verl)."""
    low, high = _clip_range(config)
    delta = log_prob - old_log_prob
    seq_log_ratio = masked_sum(delta, response_mask, axis=-1) / response_mask.sum(dim=-1).clamp(min=1)
    # value ℓ_i everywhere, gradient of lp_it: the straight-through trick behind GSPO-token
    token_log_ratio = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(token_log_ratio, max=10.0))
    _, _, losses, clip_used = _ppo_clip(advantages, ratio, low, high)
    pg_loss = _aggregate(_weighted(losses, rollout_is_weights), response_mask, "seq-mean-token-mean", config)
    return pg_loss, _metrics(
        masked_mean(clip_used.float(), response_mask).item(), masked_mean(-delta, response_mask).item()
    )


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """Plain policy gradient −A·log π (no ratio, no clipping); all metrics 0."""
    losses = _weighted(-log_prob * advantages, rollout_is_weights)
    return _aggregate(losses, response_mask, loss_agg_mode, config), _metrics()


def _clip_cov_selection(advantages, log_prob, response_mask, already_clipped, config):
    """corr = 0 on a random subset of the valid, not-yet-clipped tokens whose covariance term lies in
    (lb, ub); 1 elsewhere. Uses the global torch RNG, like verl."""
    ratio_option = _option(config, "clip_cov_ratio")
    if not ratio_option > 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {ratio_option}")
    valid = response_mask > 0
    lp = log_prob.detach()
    cov = (advantages - masked_mean(advantages, response_mask)) * (lp - masked_mean(lp, response_mask))
    cov = torch.where(valid & ~already_clipped, cov, torch.full_like(cov, float("-inf")))
    in_band = valid & (cov > _option(config, "clip_cov_lb")) & (cov < _option(config, "clip_cov_ub"))
    candidates = torch.nonzero(in_band)
    k = max(int(ratio_option * response_mask.sum().item()), 1)
    corr = torch.ones_like(advantages)
    if len(candidates):
        chosen = candidates[torch.randperm(len(candidates))[: min(k, len(candidates))]]
        corr[chosen[:, 0], chosen[:, 1]] = 0.0
    return corr


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """Clip-Cov: PPO clip, plus a few high-covariance tokens dropped from the loss (no ±20 clamp)."""
    low, high = _clip_range(config)
    delta = log_prob - old_log_prob
    _, _, clipped, clip_used = _ppo_clip(advantages, torch.exp(delta), low, high)
    with torch.no_grad():
        corr = _clip_cov_selection(advantages, log_prob, response_mask, clip_used & (response_mask > 0), config)
    losses = _weighted(clipped * corr, rollout_is_weights)
    return (
        _aggregate(losses, response_mask, loss_agg_mode, config),
        _metrics(masked_mean((corr == 0).float(), response_mask).item(), masked_mean(-delta, response_mask).item()),
    )


def _kl_cov_selection(advantages, log_prob, response_mask, ratio_option) -> torch.Tensor:
    """(row, column) of the top-k covariance tokens among the valid ones (row-major order, plain means)."""
    valid = torch.nonzero(response_mask > 0)
    if not len(valid):
        return valid
    adv = advantages[valid[:, 0], valid[:, 1]]
    lp = log_prob.detach()[valid[:, 0], valid[:, 1]]
    cov = (adv - adv.mean()) * (lp - lp.mean())
    k = max(1, int(len(valid) * ratio_option))
    return valid[torch.topk(cov, min(k, len(cov))).indices]


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """KL-Cov: unclipped −A·r, plus κ|δ| on the top-k covariance tokens. ppo_kl reports mean |δ|."""
    coef = _option(config, "ppo_kl_coef")
    coef = 1.0 if coef is None else coef
    delta = log_prob - old_log_prob
    losses = -advantages * torch.exp(delta)
    with torch.no_grad():
        top = _kl_cov_selection(advantages, log_prob, response_mask, _option(config, "kl_cov_ratio"))
    selected = torch.zeros_like(response_mask, dtype=torch.bool)
    selected[top[:, 0], top[:, 1]] = True
    losses = _weighted(torch.where(selected, losses + coef * delta.abs(), losses), rollout_is_weights)
    return (
        _aggregate(losses, response_mask, loss_agg_mode, config),
        _metrics(ppo_kl=masked_mean(delta.abs(), response_mask).item()),
    )


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """GMPO: geometric mean of the (sign-aware, one-sided clipped) token ratios per sequence; plain mean
    over all B rows (`loss_agg_mode` and `global_batch_info` are ignored, as in verl)."""
    low, high = _clip_range(config)
    delta = log_prob - old_log_prob
    sign = torch.sign(advantages)
    delta_clipped = torch.clamp(delta, -low, high)
    # A>0 clips only the upper side, A<0 only the lower side, A=0 gives 0
    delta_star = sign * torch.minimum(sign * delta, sign * delta_clipped)
    lengths = response_mask.sum(dim=-1) + 1e-8
    seq_ratio = torch.exp(masked_sum(delta_star, response_mask, axis=-1) / lengths)
    seq_adv = masked_sum(advantages, response_mask, axis=-1) / lengths
    seq_loss = -seq_adv * seq_ratio
    if rollout_is_weights is not None:
        log_w = torch.log(rollout_is_weights.detach() + 1e-10)  # a zero weight becomes ≈1e-10, as in verl
        seq_loss = seq_loss * torch.exp(masked_sum(log_w, response_mask, axis=-1) / lengths)
    clipped = (delta != delta_clipped).float()
    return seq_loss.mean(), _metrics(
        masked_mean(clipped * (advantages > 0), response_mask).item(),
        masked_mean(-delta, response_mask).item(),
        masked_mean(clipped * (advantages < 0), response_mask).item(),
    )


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """CISPO: −sg(clip(r))·A·log π — the clipped ratio only weights the gradient, never blocks it."""
    low, high = _clip_range(config)
    log_ratio = _clamped_log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1 - low, 1 + high).detach()
    losses = _weighted(-clipped_ratio * advantages * log_prob, rollout_is_weights)
    clipfrac = masked_mean((ratio != clipped_ratio).float(), response_mask)
    return (
        _aggregate(losses, response_mask, loss_agg_mode, config),
        _metrics(clipfrac.item(), masked_mean(-log_ratio, response_mask).item()),
    )


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """SAPO: a smooth sigmoid gate σ(τ(r−1))·4/τ instead of a hard clip; always seq-mean-token-mean."""
    log_ratio = _clamped_log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    tau = torch.where(
        advantages > 0,
        torch.full_like(ratio, _option(config, "tau_pos")),
        torch.full_like(ratio, _option(config, "tau_neg")),
    )
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    losses = _weighted(-gate * advantages, rollout_is_weights)
    pg_loss = _aggregate(losses, response_mask, "seq-mean-token-mean", config)
    return pg_loss, _metrics(ppo_kl=masked_mean(-log_ratio, response_mask).item())


@register_policy_loss("tis")
def compute_policy_loss_tis(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """ROLL's `tis`: −sg(clip(r, tis_lower_bound, tis_upper_bound))·A·log π (truncated IS, no PPO clip)."""
    lower, upper = _option(config, "tis_lower_bound"), _option(config, "tis_upper_bound")
    log_ratio = _clamped_log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    weight = torch.clamp(ratio, lower, upper).detach()
    losses = _weighted(-weight * advantages * log_prob, rollout_is_weights)
    clipfrac = masked_mean((ratio != weight).float(), response_mask)
    return (
        _aggregate(losses, response_mask, loss_agg_mode, config),
        _metrics(clipfrac.item(), masked_mean(-log_ratio, response_mask).item()),
    )


@register_policy_loss("kimi15")
def compute_policy_loss_kimi15(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    """ROLL's `kimi15` (Kimi k1.5): −A·log π + τ/2·(log π − log π_old)²."""
    tau = _option(config, "kimi15_tau")
    log_ratio = log_prob - old_log_prob
    losses = _weighted(-advantages * log_prob + 0.5 * tau * log_ratio**2, rollout_is_weights)
    return (
        _aggregate(losses, response_mask, loss_agg_mode, config),
        _metrics(0.0, masked_mean(-log_ratio, response_mask).item()),
    )


@register_policy_loss("topr", inputs=("scores",))
def compute_policy_loss_topr(
    old_log_prob,
    log_prob,
    advantages,
    response_mask,
    loss_agg_mode="token-mean",
    config=None,
    rollout_is_weights=None,
    scores=None,
):
    """ROLL's `topr` (tapered off-policy REINFORCE): samples with score > 0 get −w₊·A·log π (no ratio);
    samples with score ≤ 0 get −w₋·sg(clip(r, 0, 1))·A·log π. `scores`: one raw score per row."""
    if scores is None or scores.shape != advantages.shape[:1]:
        shape = None if scores is None else tuple(scores.shape)
        raise ValueError(f"topr needs one score per row (shape {tuple(advantages.shape[:1])}), got {shape}")
    log_ratio = _clamped_log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    positive = (scores > 0).to(log_prob.dtype).unsqueeze(-1)
    truncated = torch.clamp(ratio, 0.0, 1.0).detach()
    weight = (
        positive * _option(config, "topr_positive_weight")
        + (1 - positive) * _option(config, "topr_negative_weight") * truncated
    )
    losses = _weighted(-weight * advantages * log_prob, rollout_is_weights)
    clipfrac = masked_mean(((ratio != truncated) & (positive == 0)).float(), response_mask)
    return (
        _aggregate(losses, response_mask, loss_agg_mode, config),
        _metrics(clipfrac.item(), masked_mean(-log_ratio, response_mask).item()),
    )
