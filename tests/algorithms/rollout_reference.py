"""Plain-Python loop references for rollout IS / rollout correction, written from the formulas of
docs/rollout_correction.md §7.2–7.6 and independent of roll's implementation: lists and `math` only,
one row and one token at a time. Tests compare roll's tensors and metrics against these.
Also the small batches and the comparison helper both test modules share.
"""

import math
import statistics

import numpy as np
import pytest
import torch

EPS = 1e-8  # masked_mean's denominator epsilon (docs/algorithms.md §1)
BOUND = 20.0


def clamp(x, lo, hi):
    return max(lo, min(hi, x))


def _valid(mask):
    return [(i, t) for i, row in enumerate(mask) for t, m in enumerate(row) if m > 0]


def _masked_mean_all(values, mask):
    cells = _valid(mask)
    return sum(values[i][t] for i, t in cells) / (len(cells) + EPS)


def _row_means(values, mask):
    return [sum(v for v, m in zip(vrow, mrow) if m > 0) / (sum(mrow) + EPS) for vrow, mrow in zip(values, mask)]


def _std_of_rows(values):
    return statistics.stdev(values) if len(values) > 1 else 0.0


def weight_stats(weights, lam_rows, mask, level, upper, lower):
    """docs/rollout_correction.md §7.3 metrics (no veto/percentiles). weights: (B, T) lists; lam_rows: per-row
    Λ (seq/geo) or None."""
    cells = _valid(mask)
    n_valid = len(cells)
    out = {"rollout_is_mean": _masked_mean_all(weights, mask)}
    if level == "token":
        out["rollout_is_ratio_fraction_high"] = sum(weights[i][t] > upper for i, t in cells) / (n_valid + EPS)
        out["rollout_is_ratio_fraction_low"] = sum(weights[i][t] < lower for i, t in cells) / (n_valid + EPS)
        out["rollout_is_max"] = max(weights[i][t] for i, t in cells)
        out["rollout_is_min"] = min(weights[i][t] for i, t in cells)
    else:
        out["rollout_is_max"] = math.exp(min(max(lam_rows), BOUND))
        out["rollout_is_min"] = math.exp(min(lam_rows))
        high = [lam > math.log(upper) for lam in lam_rows]
        low = [lam < (math.log(lower) if lower > 0 else -math.inf) for lam in lam_rows]
        if level == "sequence":
            out["rollout_is_ratio_fraction_high"] = sum(high) / len(lam_rows)
            out["rollout_is_ratio_fraction_low"] = sum(low) / len(lam_rows)
        else:
            out["rollout_is_ratio_fraction_high"] = sum(high[i] for i, _ in cells) / (n_valid + EPS)
            out["rollout_is_ratio_fraction_low"] = sum(low[i] for i, _ in cells) / (n_valid + EPS)
    clamped = [[clamp(w, lower, upper) for w in row] for row in weights]
    mean_c = _masked_mean_all(clamped, mask)
    if n_valid > 1:
        second = _masked_mean_all([[w * w for w in row] for row in clamped], mask)
        out["rollout_is_std"] = math.sqrt(max(second - mean_c**2, 0.0))
    else:
        out["rollout_is_std"] = 0.0
    normalised = [[w / (mean_c + EPS) for w in row] for row in clamped]
    out["rollout_is_eff_sample_size"] = 1.0 / _masked_mean_all([[w * w for w in row] for row in normalised], mask)
    q = _row_means(weights, mask)
    out.update(
        {
            "rollout_is_seq_mean": sum(q) / len(q),
            "rollout_is_seq_std": _std_of_rows(q),
            "rollout_is_seq_max": max(q),
            "rollout_is_seq_min": min(q),
            "rollout_is_seq_max_deviation": max(abs(x - 1.0) for x in q),
            "rollout_is_seq_fraction_high": sum(x > upper for x in q) / len(q),
            "rollout_is_seq_fraction_low": sum(x < lower for x in q) / len(q),
        }
    )
    return out


def offpolicy(old, rollout, mask):
    """docs/rollout_correction.md §7.4 with bare names."""
    t_bar = _row_means(old, mask)
    r_bar = _row_means(rollout, mask)
    diff = [r - t for r, t in zip(r_bar, t_bar)]
    ell = [[o - r for o, r in zip(orow, rrow)] for orow, rrow in zip(old, rollout)]
    n_rows = len(old)
    return {
        "training_ppl": sum(math.exp(-x) for x in t_bar) / n_rows,
        "training_log_ppl": sum(-x for x in t_bar) / n_rows,
        "kl": _masked_mean_all([[-x for x in row] for row in ell], mask),
        "k3_kl": _masked_mean_all([[math.exp(x) - x - 1 for x in row] for row in ell], mask),
        "rollout_ppl": sum(math.exp(-x) for x in r_bar) / n_rows,
        "rollout_log_ppl": sum(-x for x in r_bar) / n_rows,
        "log_ppl_diff": sum(diff) / n_rows,
        "log_ppl_abs_diff": sum(abs(d) for d in diff) / n_rows,
        "log_ppl_diff_max": max(diff),
        "log_ppl_diff_min": min(diff),
        "ppl_ratio": sum(math.exp(d) for d in diff) / n_rows,
    }


def _level_rows(ell, mask, level):
    """Per-row Λ (sequence: masked sum; geometric: masked mean with the 1e-8 epsilon)."""
    rows = []
    for erow, mrow in zip(ell, mask):
        total = sum(e for e, m in zip(erow, mrow) if m > 0)
        rows.append(total if level == "sequence" else total / (sum(mrow) + EPS))
    return rows


def seed_reference(old, rollout, mask, level, mode, upper, lower=None, veto=1e-4):
    """Returns (final weights, metrics without the `mismatch/` prefix) following docs/rollout_correction.md §7.2
    step by step."""
    lower = 1.0 / upper if lower is None else lower
    n_rows, n_cols = len(old), len(old[0])
    ell = [[o - r for o, r in zip(orow, rrow)] for orow, rrow in zip(old, rollout)]
    if level == "token":
        lam_rows = None
        weights = [[math.exp(clamp(e, -BOUND, BOUND)) for e in row] for row in ell]
    else:
        lam_rows = _level_rows(ell, mask, level)
        weights = [[math.exp(clamp(lam, -BOUND, BOUND))] * n_cols for lam in lam_rows]
    catastrophic = [
        [veto is not None and mask[i][t] > 0 and ell[i][t] < math.log(veto) for t in range(n_cols)]
        for i in range(n_rows)
    ]
    has_cat = [any(row) for row in catastrophic]
    metrics = {
        "rollout_is_veto_fraction": sum(has_cat) / n_rows,
        "rollout_is_catastrophic_token_fraction": _masked_mean_all(
            [[float(c) for c in row] for row in catastrophic], mask
        ),
    }
    metrics.update(weight_stats(weights, lam_rows, mask, level, upper, lower))
    valid_weights = [weights[i][t] for i, t in _valid(mask)]
    for pct in (25, 50, 75, 95, 99):
        metrics[f"rollout_is_p{pct}"] = float(np.percentile(np.array(valid_weights, dtype=np.float64), pct))
    if mode == "truncate":
        final = [[min(w, upper) for w in row] for row in weights]
    else:
        keep = [[lower <= w <= upper for w in row] for row in weights]
        name = "clipped" if mode == "clip" else "masked"
        metrics[f"rollout_is_{name}_fraction"] = _masked_mean_all([[1.0 - k for k in row] for row in keep], mask)
        if level == "token":
            lost = [any(not k and m > 0 for k, m in zip(krow, mrow)) for krow, mrow in zip(keep, mask)]
        else:  # one decision per row, empty rows included
            lost = [not lower <= math.exp(clamp(lam, -BOUND, BOUND)) <= upper for lam in lam_rows]
        metrics[f"rollout_is_seq_{name}_fraction"] = sum(lost) / n_rows
        final = [[w if k else 0.0 for w, k in zip(wrow, krow)] for wrow, krow in zip(weights, keep)]
    final = [[0.0 if has_cat[i] or mask[i][t] == 0 else final[i][t] for t in range(n_cols)] for i in range(n_rows)]
    metrics.update({f"mismatch_{k}": v for k, v in offpolicy(old, rollout, mask).items()})
    return final, metrics


# ----------------------------------------------------------- head (docs/rollout_correction.md §7.6)


def head_is_reference(old, rollout, mask, level, upper, batch_normalize):
    n_cols = len(old[0])
    ell = [[o - r for o, r in zip(orow, rrow)] for orow, rrow in zip(old, rollout)]
    if level == "token":
        lam_rows = None
        raw = [[math.exp(clamp(e, -BOUND, BOUND)) for e in row] for row in ell]
    else:
        lam_rows = _level_rows(ell, mask, "sequence")
        raw = [[math.exp(clamp(lam, -BOUND, BOUND))] * n_cols for lam in lam_rows]
    raw = [[w * m for w, m in zip(wrow, mrow)] for wrow, mrow in zip(raw, mask)]
    metrics = weight_stats(raw, lam_rows, mask, level, upper, 1.0 / upper)
    weights = [[min(w, upper) for w in row] for row in raw]
    if batch_normalize:
        if level == "token":
            factor = _masked_mean_all(weights, mask)
        else:
            q = _row_means(weights, mask)
            non_empty = [x for x, mrow in zip(q, mask) if sum(mrow) > 0]
            factor = sum(non_empty) / max(len(non_empty), EPS)
        if factor > 1e-8:
            weights = [[w / factor for w in row] for row in weights]
            metrics["rollout_is_batch_norm_factor"] = factor
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return weights, metrics


def _divergence(kind, e):
    e = clamp(e, -BOUND, BOUND)
    return {"k1": -e, "k2": 0.5 * e * e, "k3": math.exp(e) - 1.0 - e}[kind]


def head_rs_reference(old, rollout, mask, options, bounds):
    """options: list of option names; bounds: list of (lo, hi) in *ratio/threshold* space, lo None for k2/k3.

    Returns (modified mask, metrics)."""
    n_rows, n_cols = len(old), len(old[0])
    ell = [[o - r for o, r in zip(orow, rrow)] for orow, rrow in zip(old, rollout)]
    non_empty = [i for i in range(n_rows) if sum(mask[i]) > 0]
    combined = [[1.0] * n_cols for _ in range(n_rows)]
    metrics = {}
    for option, (lo_ratio, hi_value) in zip(options, bounds):
        kind = option[-2:]
        token_stat = [[_divergence(kind, e) for e in row] for row in ell]
        if option.startswith("token_"):
            stat, row_stat = token_stat, None
        else:
            row_stat = []
            for i in range(n_rows):
                vals = [token_stat[i][t] for t in range(n_cols) if mask[i][t] > 0]
                if option.startswith("seq_sum_"):
                    row_stat.append(sum(vals))
                elif option.startswith("seq_mean_"):
                    row_stat.append(sum(vals) / (len(vals) + EPS))
                else:
                    row_stat.append(max(vals) if vals else 0.0)
            stat = [[row_stat[i]] * n_cols for i in range(n_rows)]
        if kind == "k1":
            lo, hi = math.log(lo_ratio), math.log(hi_value)
        else:
            lo, hi = None, hi_value
        keep = [[(lo is None or s >= lo) and s <= hi for s in row] for row in stat]
        cells = _valid(mask)
        q_all = row_stat if row_stat is not None else _row_means(stat, mask)
        q = [q_all[i] for i in non_empty]
        if row_stat is None:
            high = sum(stat[i][t] > hi for i, t in cells) / (len(cells) + EPS)
            low = sum(stat[i][t] < lo for i, t in cells) / (len(cells) + EPS) if lo is not None else 0.0
        else:
            high = sum(x > hi for x in q) / len(q)
            low = sum(x < lo for x in q) / len(q) if lo is not None else 0.0
        clamped = [[clamp(s, lo if lo is not None else 0.0, hi) for s in row] for row in stat]
        if len(cells) > 1:
            mean_c = _masked_mean_all(clamped, mask)
            std = math.sqrt(max(_masked_mean_all([[c * c for c in row] for row in clamped], mask) - mean_c**2, 0.0))
        else:
            std = 0.0
        lost = [any(not keep[i][t] and mask[i][t] > 0 for t in range(n_cols)) for i in range(n_rows)]
        m = {
            "mean": _masked_mean_all(stat, mask),
            "max": max(stat[i][t] for i, t in cells),
            "min": min(stat[i][t] for i, t in cells),
            "fraction_high": high,
            "fraction_low": low,
            "std": std,
            "seq_mean": sum(q) / len(q),
            "seq_std": _std_of_rows(q),
            "seq_max": max(q),
            "seq_min": min(q),
            "seq_max_deviation": max(abs(x) for x in q),
            "seq_fraction_high": sum(x > hi for x in q) / len(q),
        }
        if lo is not None:
            m["seq_fraction_low"] = sum(x < lo for x in q) / len(q)
        m["masked_fraction"] = _masked_mean_all([[1.0 - k for k in row] for row in keep], mask)
        m["seq_masked_fraction"] = sum(lost[i] for i in non_empty) / len(non_empty)
        metrics.update({f"rollout_rs_{option}_{k}": v for k, v in m.items()})
        combined = [[c * float(k) for c, k in zip(crow, krow)] for crow, krow in zip(combined, keep)]
    metrics["rollout_rs_masked_fraction"] = _masked_mean_all([[1.0 - c for c in row] for row in combined], mask)
    lost_total = [any(c == 0 and m > 0 for c, m in zip(crow, mrow)) for crow, mrow in zip(combined, mask)]
    metrics["rollout_rs_seq_masked_fraction"] = sum(lost_total) / n_rows
    modified = [[m * c for m, c in zip(mrow, crow)] for mrow, crow in zip(mask, combined)]
    return modified, metrics


def chi2_reference(old, rollout, mask):
    ell = [[o - r for o, r in zip(orow, rrow)] for orow, rrow in zip(old, rollout)]
    token = _masked_mean_all([[math.exp(clamp(e, -BOUND, BOUND)) ** 2 for e in row] for row in ell], mask) - 1.0
    seq_sums = [sum(e for e, m in zip(erow, mrow) if m > 0) for erow, mrow in zip(ell, mask)]
    seq = sum(math.exp(2 * clamp(s, -BOUND, BOUND)) for s in seq_sums) / len(seq_sums) - 1.0
    return {"chi2_token": token, "chi2_seq": seq}


# ----------------------------------------------------------------------------- shared test data


def make_batch(seed=0):
    """6 rows of lengths 9, 7, 5, 0, 3, 8 with a valid catastrophic token (row 0), a catastrophic token on
    padding (row 2), a log-ratio beyond the ±20 safety bound (row 4) and huge ratios on padding (row 1)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([9, 7, 5, 0, 3, 8])
    mask = (torch.arange(9)[None, :] < lengths[:, None]).float()
    old = -torch.rand(6, 9, generator=gen) * 3 - 0.05
    log_ratio = torch.randn(6, 9, generator=gen) * 0.4
    log_ratio[0, 2] = -12.0
    log_ratio[2, 7] = -30.0
    log_ratio[4, 1] = 25.0
    log_ratio[1, 8] = 40.0
    return old, old - log_ratio, mask


def from_log_ratios(rows, lengths=None):
    """old = log_ratio, rollout = 0, with a 0/1 mask from the row lengths (default: all valid)."""
    log_ratio = torch.tensor(rows, dtype=torch.float32)
    if lengths is None:
        mask = torch.ones_like(log_ratio)
    else:
        mask = (torch.arange(log_ratio.shape[1])[None, :] < torch.tensor(lengths)[:, None]).float()
    return log_ratio, torch.zeros_like(log_ratio), mask


def assert_close(actual, expected, rel=1e-4, abs_=1e-5):
    assert set(actual) == set(expected)
    for key, value in expected.items():
        assert actual[key] == pytest.approx(value, rel=rel, abs=abs_), key
