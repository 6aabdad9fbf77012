"""Episode scores → normalised, token-level rewards; padding rows; per-tag episode metrics."""

from collections import defaultdict

import numpy as np
import torch

from roll.distributed.data_proto import DataProto

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


def token_level(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's score on its LAST GENERATED token: in a multi-turn response observations follow some
    replies, so the last real token is not necessarily the model's."""
    positions = torch.arange(response_mask.shape[1]).expand_as(response_mask)
    last = torch.where(response_mask > 0, positions, -1).max(dim=1).values.clamp(min=0)
    out = torch.zeros_like(response_mask, dtype=torch.float32)
    out[torch.arange(len(scores)), last] = scores.float() * (response_mask.sum(-1) > 0)
    return out


def pad_for_training(batch: DataProto, multiple: int) -> DataProto:
    """Append rows that carry no loss (response_mask 0, score 0, a group of their own) until `len` divides
    `multiple`; step-wise rollouts produce a varying number of rows. With token-mean aggregation they
    change nothing; seq-mean modes count them as empty rows."""
    pad = (-len(batch)) % multiple
    if pad == 0:
        return batch
    filler = batch[[0] * pad]
    for key in ("response_mask", "token_level_scores", "scores", "rollout_log_probs"):
        if key in filler.batch:
            filler.batch[key] = torch.zeros_like(filler.batch[key])
    filler.non_tensor_batch["uid"] = np.array([f"padding-{i}" for i in range(pad)], dtype=object)
    return DataProto.concat([batch, filler])


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
