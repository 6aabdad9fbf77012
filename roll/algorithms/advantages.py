"""Advantage estimators (docs/algorithms.md §2), each registered by the name the YAML's `adv_estimator` uses.

All take per-token rewards (B, T); outcome estimators use the row sum s_i as the sequence score and
broadcast one advantage over the row's valid tokens. Grouping is by `index` (the prompt uid).

Registration also declares what an estimator needs from the pipeline beyond rewards (`EstimatorSpec`):
the config checks and the pipeline read these requirements, never the estimator's name.
"""

from collections import defaultdict
from dataclasses import dataclass

import torch

from roll.algorithms._config import config_get
from roll.algorithms.reductions import masked_whiten

__all__ = [
    "register_adv_est",
    "get_adv_estimator_fn",
    "get_adv_estimator_spec",
    "EstimatorSpec",
    "FORWARD_PASSES",
    "ADV_ESTIMATOR_REGISTRY",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_gpg_outcome_advantage",
    "compute_optimal_token_baseline_advantage",
]

ADV_ESTIMATOR_REGISTRY: dict = {}  # name → function, as in verl
_SPECS: dict = {}  # name → (function, EstimatorSpec): requirements belong to the function registered with them
# Per-token quantities of the sampled responses that actor_train can compute besides log-probs; an
# estimator names the ones it reads in `forward_passes` and receives each under that keyword.
FORWARD_PASSES = ("sum_pi_squared",)


@dataclass(frozen=True)
class EstimatorSpec:
    """What an estimator needs from the pipeline besides token rewards, mask and group index."""

    name: str
    min_group_size: int = 1  # 2 when the maths compares a sample with its group (a baseline from `index`)
    forward_passes: tuple[str, ...] = ()  # extra actor_train forwards, from FORWARD_PASSES
    greedy_baseline: bool = False  # reads `reward_baselines`: the reward of one greedy answer per prompt
    needs_critic: bool = False  # reads `values` from a critic role
    step_rows: bool = False  # agentic: needs one row per turn (the step env manager)
    anchor_state_groups: bool = False  # agentic: rewards are GiGPO's episode + same-state step groups
    # agentic with group_size 1: the estimator ROLL's agentic pipeline computes under this name (grpo → reinforce)
    agentic_group_of_one: str | None = None

    def __post_init__(self):
        if not isinstance(self.min_group_size, int) or self.min_group_size < 1:
            raise ValueError(f"estimator {self.name!r}: min_group_size must be an int ≥ 1, got {self.min_group_size!r}")
        unknown = [key for key in self.forward_passes if key not in FORWARD_PASSES]
        if unknown:
            raise ValueError(
                f"estimator {self.name!r}: unknown forward_passes {unknown}; the pipeline computes "
                f"{list(FORWARD_PASSES)}"
            )


def register_adv_est(
    name: str,
    *,
    min_group_size: int = 1,
    forward_passes=(),
    greedy_baseline: bool = False,
    needs_critic: bool = False,
    step_rows: bool = False,
    anchor_state_groups: bool = False,
    agentic_group_of_one: str | None = None,
):
    """Decorator registering an estimator under `name`, with its requirements (verl's `register_adv_est(name)`
    still works: no requirements)."""
    if isinstance(forward_passes, str):  # ("sum_pi_squared") is a str, not a tuple
        forward_passes = (forward_passes,)
    spec = EstimatorSpec(
        name,
        min_group_size,
        tuple(forward_passes),
        bool(greedy_baseline),
        bool(needs_critic),
        bool(step_rows),
        bool(anchor_state_groups),
        agentic_group_of_one,
    )

    def add(fn):
        if name in ADV_ESTIMATOR_REGISTRY and (
            ADV_ESTIMATOR_REGISTRY[name] is not fn or get_adv_estimator_spec(name) != spec
        ):
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADV_ESTIMATOR_REGISTRY[name] = fn
        _SPECS[name] = (fn, spec)
        return fn

    return add


def get_adv_estimator_fn(name: str):
    name = getattr(name, "value", name)  # also accept a str Enum member, as verl does
    if name not in ADV_ESTIMATOR_REGISTRY:
        raise ValueError(f"unknown adv_estimator {name!r}; valid: {sorted(ADV_ESTIMATOR_REGISTRY)}")
    return ADV_ESTIMATOR_REGISTRY[name]


def get_adv_estimator_spec(name: str) -> EstimatorSpec:
    """The requirements `name` was registered with; a function put into ADV_ESTIMATOR_REGISTRY by hand
    (verl style) has none."""
    fn = get_adv_estimator_fn(name)  # the same error for an unknown name
    name = getattr(name, "value", name)
    registered_fn, spec = _SPECS.get(name, (None, None))
    return spec if registered_fn is fn else EstimatorSpec(name)


def _uids(index) -> list:
    # A tensor's elements are 0-d tensors hashed by identity: turn them into Python scalars first.
    return index.tolist() if isinstance(index, torch.Tensor) else list(index)


def _groups(index) -> dict:
    """uid → list of row numbers, in row order."""
    groups = defaultdict(list)
    for row, uid in enumerate(_uids(index)):
        groups[uid].append(row)
    return groups


def _group_ids(index) -> torch.Tensor:
    """Dense group number per row (0, 1, ... in order of first appearance)."""
    ids: dict = {}
    return torch.tensor([ids.setdefault(uid, len(ids)) for uid in _uids(index)], dtype=torch.long)


def _broadcast(per_row: torch.Tensor, response_mask: torch.Tensor):
    advantages = per_row.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_est("gae", needs_critic=True)
@torch.no_grad()
def compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam):
    response_mask = response_mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    last_adv = torch.zeros_like(values[:, 0])
    raw = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        m = response_mask[:, t]
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * last_adv
        # masked steps carry the next valid step's state through (γ applies once across a gap)
        next_value = values[:, t] * m + (1 - m) * next_value
        last_adv = adv * m + (1 - m) * last_adv
        raw[:, t] = last_adv
    returns = raw + values
    return masked_whiten(raw, response_mask), returns


@register_adv_est("grpo", min_group_size=2, agentic_group_of_one="reinforce")
@torch.no_grad()
def compute_grpo_outcome_advantage(
    token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True, config=None
):
    scores = token_level_rewards.sum(dim=-1)
    out = torch.zeros_like(scores)
    for rows in _groups(index).values():
        group = scores[rows]
        # singleton groups: mean 0, std 1 → the raw score (over 1 + ε when normalising)
        mean, std = (group.mean(), group.std()) if len(rows) > 1 else (0.0, 1.0)
        out[rows] = (group - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else group - mean
    return _broadcast(out, response_mask)


def _group_mean_std(scores: torch.Tensor, index, eps: float):
    """Vectorised per-row group mean/std (group statistics of docs/algorithms.md §1): variance floored at eps,
    singletons 0/1. Also returns the per-row group count and group score sum (used by vectorised RLOO)."""
    g = _group_ids(index).to(scores.device)
    n_groups = int(g.max()) + 1 if len(g) else 0
    scores = scores.float()  # verl computes group statistics in float32
    zeros = torch.zeros(n_groups, device=scores.device)
    count = zeros.index_add(0, g, torch.ones_like(scores))
    s1 = zeros.index_add(0, g, scores)
    s2 = zeros.index_add(0, g, scores * scores)
    mean = s1 / count.clamp(min=1)
    var = (s2 - s1 * s1 / count.clamp(min=1)) / (count - 1).clamp(min=1)
    std = var.clamp(min=eps).sqrt()
    singleton = count <= 1
    mean, std = torch.where(singleton, 0.0, mean), torch.where(singleton, 1.0, std)
    return mean[g], std[g], count[g], s1[g]


@register_adv_est("grpo_vectorized", min_group_size=2)
@torch.no_grad()
def compute_grpo_vectorized_outcome_advantage(
    token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True, config=None
):
    scores = token_level_rewards.sum(dim=-1).float()
    mean, std, _, _ = _group_mean_std(scores, index, epsilon)
    out = (scores - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else scores - mean
    return _broadcast(out, response_mask)


@register_adv_est("grpo_passk", min_group_size=2)
@torch.no_grad()
def compute_grpo_passk_outcome_advantage(
    token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True, config=None, **kwargs
):
    normalise = bool(config_get(config, "norm_adv_by_std_in_grpo", True))  # the argument is ignored, as in verl
    scores = token_level_rewards.sum(dim=-1)
    out = torch.zeros_like(scores)
    for uid, rows in _groups(index).items():
        if len(rows) < 2:
            raise ValueError(f"grpo_passk needs at least 2 samples per group; group {uid!r} has {len(rows)}")
        group = scores[rows]
        top, where = torch.topk(group, 2)
        value = top[0] - top[1]
        if normalise:
            value = value / (group.std() + epsilon)
        out[rows[where[0].item()]] = value
    return _broadcast(out, response_mask)


@register_adv_est("rloo", min_group_size=2)
@torch.no_grad()
def compute_rloo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, config=None, **kwargs):
    scores = token_level_rewards.sum(dim=-1)
    out = scores.clone()  # singletons keep their raw score
    for rows in _groups(index).values():
        n = len(rows)
        if n > 1:
            group = scores[rows]
            out[rows] = group * n / (n - 1) - group.mean() * n / (n - 1)
    return _broadcast(out, response_mask)


@register_adv_est("rloo_vectorized", min_group_size=2)
@torch.no_grad()
def compute_rloo_vectorized_outcome_advantage(
    token_level_rewards, response_mask, index, epsilon=1e-6, config=None, **kwargs
):
    scores = token_level_rewards.sum(dim=-1).float()
    _, _, count, total = _group_mean_std(scores, index, epsilon)
    out = (count * scores - total) / (count - 1).clamp(min=1) * (count > 1)  # singletons → 0
    return _broadcast(out, response_mask)


@register_adv_est("opo", min_group_size=2)
@torch.no_grad()
def compute_opo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, config=None, **kwargs):
    scores = token_level_rewards.sum(dim=-1)
    lengths = response_mask.sum(dim=-1)
    out = torch.zeros_like(scores)
    for rows in _groups(index).values():
        baseline = (lengths[rows] * scores[rows]).sum() / lengths[rows].sum() if len(rows) > 1 else 0.0
        out[rows] = scores[rows] - baseline
    return _broadcast(out, response_mask)


@register_adv_est("reinforce_plus_plus")
@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards, response_mask, config=None, **kwargs):
    gamma = config_get(config, "gamma", 1.0)
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[1])):
        # G_t = r_t + γ·m_{t+1}·G_{t+1}: rewards are not masked, the chain is cut right after a masked t
        running = token_level_rewards[:, t] + gamma * running
        returns[:, t] = running
        running = running * response_mask[:, t]
    return masked_whiten(returns, response_mask) * response_mask, returns


@register_adv_est("reinforce_plus_plus_baseline", min_group_size=2)
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards, response_mask, index, epsilon=1e-6, config=None, **kwargs
):
    scores = token_level_rewards.sum(dim=-1)
    centred = scores.clone()
    for rows in _groups(index).values():
        if len(rows) > 1:
            centred[rows] = scores[rows] - scores[rows].mean()
    broadcast = centred.unsqueeze(-1) * response_mask
    advantages = masked_whiten(broadcast, response_mask) * response_mask
    return advantages, advantages


@register_adv_est("remax", greedy_baseline=True)
@torch.no_grad()
def compute_remax_outcome_advantage(token_level_rewards, reward_baselines, response_mask, config=None, **kwargs):
    returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    return returns - reward_baselines.unsqueeze(-1) * response_mask, returns


@register_adv_est("gpg", min_group_size=2)
@torch.no_grad()
def compute_gpg_outcome_advantage(
    token_level_rewards, response_mask, index, epsilon=1e-6, f_norm=1.0, alpha=1.0, config=None, **kwargs
):
    scores = token_level_rewards.sum(dim=-1)
    alpha = len(scores) / max(int((scores != 0).sum()), 1)  # recomputed from the batch, as in verl
    out = torch.zeros_like(scores)
    for rows in _groups(index).values():
        mean = scores[rows].mean() if len(rows) > 1 else 0.0
        out[rows] = alpha * (scores[rows] - mean) / f_norm
    return _broadcast(out, response_mask)


def _reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    return x.flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])


def _zero_unique_longest_tail(baseline: torch.Tensor, rows: list, lengths: torch.Tensor) -> None:
    """In one group, the unique longest response keeps its full return past the second-longest length."""
    counts = lengths[rows]
    ordered = torch.sort(counts, descending=True).values
    if ordered[0] == ordered[1]:
        return  # a tie for the longest: nothing to zero
    longest = rows[int(torch.argmax(counts))]
    baseline[longest, int(ordered[1]) :] = 0.0


@register_adv_est("optimal_token_baseline", min_group_size=2, forward_passes=("sum_pi_squared",))
@torch.no_grad()
def compute_optimal_token_baseline_advantage(
    token_level_rewards,
    response_mask,
    index,
    old_log_probs,
    sum_pi_squared,
    rollout_is_weights=None,
    handle_zero_tail=False,
    epsilon=1e-8,
    config=None,
    **kwargs,
):
    """Per-(group, position) baseline weighted by W_t = Σ_{u≤t} (1 − 2π_u + Σ_v π_v²)(·ρ_u²) (docs/algorithms.md §2.10).

    `config` and extra kwargs are accepted and ignored so registry dispatch works.
    """
    mask = response_mask.to(token_level_rewards.dtype)
    returns = _reverse_cumsum(token_level_rewards * mask)  # not re-masked: padding keeps the later rewards
    weight = 1.0 - 2.0 * old_log_probs.exp() + sum_pi_squared
    if rollout_is_weights is not None:
        weight = weight * rollout_is_weights.square()
    weight_sum = (weight * mask).cumsum(dim=-1)
    baseline = torch.zeros_like(returns)
    lengths = mask.sum(dim=-1)
    for rows in _groups(index).values():
        if len(rows) < 2:
            continue  # singleton: baseline 0
        num = (returns[rows] * weight_sum[rows] * mask[rows]).sum(dim=0)
        den = (weight_sum[rows] * mask[rows]).sum(dim=0)
        baseline[rows] = num / (den + epsilon)  # one value per column, shared by the members
        if handle_zero_tail:
            _zero_unique_longest_tail(baseline, rows, lengths)
    return (returns - baseline) * mask, returns
