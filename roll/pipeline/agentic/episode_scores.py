"""Episode scores: normalisation within groups, and per-tag episode metrics."""

from collections import defaultdict

import numpy as np
import torch

EPS = 1e-6


def normalize_scores(
    scores: torch.Tensor, groups: np.ndarray, mean_type: str | None, std_type: str | None
) -> torch.Tensor:
    """(score − mean) / (std + ε), with mean and std over the row's group ("group") or over all rows
    ("batch"); None skips that part. std is the population std (a one-row group has std 0)."""
    out = scores.float().clone()
    index = defaultdict(list)
    for row, key in enumerate(groups):
        index[key].append(row)

    def stat(kind: str, fn) -> torch.Tensor:
        if kind == "batch":
            return torch.full_like(out, fn(scores.float()))
        values = torch.empty_like(out)
        for rows in index.values():
            values[rows] = fn(scores[rows].float())
        return values

    if mean_type is not None:
        out = out - stat(mean_type, lambda x: x.mean())
    if std_type is not None:
        out = out / (stat(std_type, lambda x: x.std(unbiased=False)) + EPS)
    return out


def episode_metrics(episodes: list[dict], prefix: str) -> dict:
    """Mean success, score, turns, invalid-action and truncation rates, per tag and over all episodes."""
    metrics = {}
    by_tag = defaultdict(list)
    for episode in episodes:
        by_tag[episode["tag"]].append(episode)
    for tag, items in sorted(by_tag.items()):
        for key in ("success", "score", "num_turns", "invalid_actions", "truncated"):
            metrics[f"{prefix}/{tag}/{key}"] = float(np.mean([e[key] for e in items]))
    metrics[f"{prefix}/success"] = float(np.mean([e["success"] for e in episodes])) if episodes else 0.0
    return metrics
