"""Episode scores: normalisation within groups, and per-tag episode metrics."""

from collections import defaultdict

import numpy as np
import torch

EPS = 1e-6
EPISODE_KEYS = ("success", "score", "num_turns", "invalid_actions", "truncated")
EPISODE_IDS = ("tag", "env_id", "traj_group_id", "seed")  # what an episode record names, not measures


def normalize_scores(
    scores: torch.Tensor, groups: np.ndarray, mean_type: str | None, std_type: str | None
) -> torch.Tensor:
    """ROLL's `agentic_reward_norm` (roll/pipeline/agentic/utils.py). Per group x (the rows sharing a `groups`
    value): mean = batch mean | mean(x) | 0 for "batch" | "group" | None; std = the unbiased std (torch's
    default, as ROLL) of the batch | of x | none. With a std: (x − mean)/(std + ε) when x has more than one row
    and std > ε, else 0 (a group of one or a constant group has nothing to compare; never (x − mean)/ε)."""
    values = scores.float()
    out = torch.empty_like(values)
    index = defaultdict(list)
    for row, key in enumerate(groups):
        index[key].append(row)
    batch_std = float(values.std()) if len(values) > 1 else 0.0
    for rows in index.values():
        x = values[rows]
        mean = {"batch": values.mean(), "group": x.mean(), None: 0.0}[mean_type]
        if std_type is None:
            out[rows] = x - mean
            continue
        std = batch_std if std_type == "batch" else (float(x.std()) if len(rows) > 1 else 0.0)
        out[rows] = (x - mean) / (std + EPS) if len(rows) > 1 and std > EPS else torch.zeros_like(x)
    return out


def episode_metrics(episodes: list[dict], prefix: str) -> dict:
    """Mean success, score, turns, invalid-action and truncation rates, per tag and over all episodes (and, for an
    agent's episodes, the rates of agent errors, timeouts and refused requests)."""
    metrics = {}
    by_tag = defaultdict(list)
    for episode in episodes:
        by_tag[episode["tag"]].append(episode)
    for tag, items in sorted(by_tag.items()):
        # every env manager's five, and whatever numbers a manager adds (tool calls, stop reasons, how an agent
        # ended: 0 where absent); words (an agent's end_reason) are the transcripts', not metrics
        numbers = {key for e in items for key, value in e.items() if isinstance(value, (bool, int, float))}
        for key in (*EPISODE_KEYS, *sorted(numbers - set(EPISODE_KEYS) - set(EPISODE_IDS))):
            metrics[f"{prefix}/{tag}/{key}"] = float(np.mean([e.get(key, 0.0) for e in items]))
    metrics[f"{prefix}/success"] = float(np.mean([e["success"] for e in episodes])) if episodes else 0.0
    return metrics
