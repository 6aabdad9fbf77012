"""Held-out validation metrics of the RLVR pipeline: mean score and pass@k, per tag and over all prompts.

With `validation.generating_args.num_return_sequences` = n samples per prompt:
    val/score/<tag>, val/score/all   mean score over all R × n samples (= accuracy for 0/1 rewards)
    val/pass@k/<tag>, val/pass@k/all for k = 1, 2, 4, … ≤ n and k = n (only when n > 1): the mean over
                                     prompts of the unbiased estimate of P(at least one of k samples passes)
A sample passes when its score ≥ `validation.pass_score` (default 1.0: the built-in rule rewards' full
marks). With 0/1 rewards pass@1 equals val/score.
"""

import math

import numpy as np


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Unbiased pass@k from n samples of which `correct` pass (Chen et al. 2021, "Evaluating Large Language
    Models Trained on Code"): 1 − C(n − c, k) / C(n, k), the probability that k samples drawn without
    replacement from the n contain at least one passing one."""
    if not 0 <= correct <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 0 ≤ correct ≤ n and 1 ≤ k ≤ n, got n={n}, correct={correct}, k={k}")
    if n - correct < k:
        return 1.0
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)


def pass_ks(n: int) -> list[int]:
    """k = 1, 2, 4, … ≤ n, and n itself."""
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return ks if ks[-1] == n else ks + [n]


def validation_metrics(scores, tags, n: int, pass_score: float = 1.0) -> dict:
    """scores: R × n sample scores, prompt-major (prompt i's samples are rows i·n … i·n + n − 1); tags: the
    R prompts' tags. Returns the val/score and (n > 1) val/pass@k metrics described in the module docstring."""
    scores = np.asarray(scores, dtype=np.float64)
    tags = np.asarray(tags, dtype=object)
    if scores.shape != (len(tags) * n,):
        raise ValueError(f"validation_metrics: {scores.shape[0]} scores for {len(tags)} prompts × {n} samples")
    per_prompt = scores.reshape(len(tags), n)
    correct = (per_prompt >= pass_score).sum(axis=1)
    groups = {tag: tags == tag for tag in sorted(set(tags))}
    groups["all"] = np.ones(len(tags), dtype=bool)
    metrics = {}
    for name, rows in groups.items():
        metrics[f"val/score/{name}"] = float(per_prompt[rows].mean())
        if n > 1:
            for k in pass_ks(n):
                metrics[f"val/pass@{k}/{name}"] = float(np.mean([pass_at_k(n, int(c), k) for c in correct[rows]]))
    return metrics
