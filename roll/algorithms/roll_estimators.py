"""ROLL's return-based estimators (docs/algorithms.md §11.5): no baseline inside the estimator — the reward
side (norm_mean_type / norm_std_type, or GiGPO's grouped rewards) supplies the baseline.

GiGPO's response-level rewards: episode-level groups (the trajectories of one initial state) plus step-level
groups (turns of those trajectories that saw the identical state), as in the GiGPO paper.
"""

import torch

from roll.algorithms.advantages import register_adv_est
from roll.algorithms.shaping import group_ids

__all__ = ["compute_reinforce_return", "compute_agentic_reinforce_return", "gigpo_rewards"]


def _discounted(token_level_rewards, response_mask, gamma):
    masked = token_level_rewards * response_mask
    returns = torch.zeros_like(masked)
    running = torch.zeros_like(masked[:, 0])
    for t in reversed(range(masked.shape[1])):
        running = masked[:, t] + gamma * running
        returns[:, t] = running
    return returns


@torch.no_grad()
def compute_reinforce_return(token_level_rewards, response_mask, gamma=1.0, **kwargs):
    """A_t = Σ_{k≥t} γ^(k−t) r_k over the masked token rewards (returns = A), masked.

    step_reinforce and gigpo use the same token maths; they differ in the response-level reward the
    agentic pipeline places on the last token (the step's discounted return / GiGPO's grouped rewards)."""
    advantages = _discounted(token_level_rewards, response_mask, gamma) * response_mask
    return advantages, advantages


register_adv_est("reinforce")(compute_reinforce_return)
register_adv_est("step_reinforce", step_rows=True)(compute_reinforce_return)
register_adv_est("gigpo", step_rows=True, anchor_state_groups=True)(compute_reinforce_return)


@register_adv_est("agentic_reinforce")
@torch.no_grad()
def compute_agentic_reinforce_return(token_level_rewards, response_mask, gamma=1.0, **kwargs):
    """Per turn (each maximal run of 1s in the mask), G = r[last token of the turn] + γ·G(next turn); every
    token of the turn gets G, tokens outside turns 0. Discount per turn, not per token."""
    advantages = torch.zeros_like(token_level_rewards, dtype=torch.float32)
    mask = response_mask > 0
    for row in range(mask.shape[0]):
        positions = torch.nonzero(mask[row]).flatten().tolist()
        turns, start = [], None
        for i, pos in enumerate(positions):
            start = pos if start is None else start
            if i + 1 == len(positions) or positions[i + 1] != pos + 1:
                turns.append((start, pos))
                start = None
        running = 0.0
        for first, last in reversed(turns):
            running = float(token_level_rewards[row, last]) + gamma * running
            advantages[row, first : last + 1] = running
    return advantages, advantages


def _group_normalise(values, gid, use_std, eps=1e-6):
    """(x − group mean)/(group std + eps); groups of one, or with std ≤ eps, get 0 (nothing to compare)."""
    out = torch.zeros_like(values)
    for g in gid.unique():
        rows = gid == g
        x = values[rows]
        if x.numel() < 2:
            continue
        std = x.std()
        if use_std and std <= eps:
            continue
        out[rows] = (x - x.mean()) / (std + eps) if use_std else x - x.mean()
    return out


def gigpo_rewards(
    episode_scores, step_returns, episode_group, state_key, *, episode_weight=1.0, step_weight=1.0, use_std=True
):
    """Per step row: episode_weight·A_episode + step_weight·A_step.

    A_episode normalises the row's episode score within its episode group (statistics over step rows, as
    verl-agent's default); A_step normalises the row's discounted step return among the rows of the SAME
    episode group with the same state key (anchor-state groups; ROLL pools equal states across groups)."""
    episode = _group_normalise(episode_scores.float(), group_ids(episode_group), use_std)
    step_key = [(g, s) for g, s in zip(episode_group, state_key, strict=True)]
    step = _group_normalise(step_returns.float(), group_ids(step_key), use_std)
    return episode_weight * episode + step_weight * step, episode, step
