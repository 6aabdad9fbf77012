"""Independent plain-Python versions of the formulas in docs/algorithms.md (lists and floats, loops only).

Tests compare the torch implementation against these, never against its own recorded output.
"""

import math


def flat_pairs(x, m):
    """(value, mask) pairs over all positions of nested lists, row-major."""
    return [(v, w) for xr, mr in zip(x, m) for v, w in zip(xr, mr)]


def masked_mean(x, m):
    pairs = flat_pairs(x, m)
    return sum(v * w for v, w in pairs if w) / (sum(w for _, w in pairs) + 1e-8)


def row_masked_mean(xr, mr):
    return sum(v * w for v, w in zip(xr, mr) if w) / (sum(mr) + 1e-8)


def masked_var(x, m):
    """Unbiased as in docs/algorithms.md §1: S/(N+1e-8) · N/(N−1)."""
    mu = masked_mean(x, m)
    n = sum(w for _, w in flat_pairs(x, m))
    v = masked_mean([[(a - mu) ** 2 for a in xr] for xr in x], m)
    return v * n / (n - 1)


def whiten(x, m):
    """Every position whitened, not re-masked."""
    mu, var = masked_mean(x, m), masked_var(x, m)
    return [[(a - mu) / math.sqrt(var + 1e-8) for a in xr] for xr in x]


def mean(xs):
    return sum(xs) / len(xs)


def stdev(xs):
    """Unbiased sample standard deviation."""
    mu = mean(xs)
    return math.sqrt(sum((a - mu) ** 2 for a in xs) / (len(xs) - 1))


def groups(index):
    out = {}
    for i, uid in enumerate(index):
        out.setdefault(uid, []).append(i)
    return out


def broadcast(per_row, m):
    return [[a * w for w in mr] for a, mr in zip(per_row, m)]


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def token_mean(x, m):
    """agg_loss token-mean (head): Σ x·m / Σ m, no eps."""
    pairs = flat_pairs(x, m)
    return sum(v * w for v, w in pairs if w) / sum(w for _, w in pairs)
