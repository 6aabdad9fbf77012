"""Per-step metrics of the driver: batch statistics, rank averaging and the progress line."""

import numpy as np

from roll.distributed.data_proto import DataProto


def mean_of_ranks(per_rank: list[dict]) -> dict:
    """Average each metric over data-parallel ranks (every rank reports the same keys)."""
    keys = per_rank[0].keys()
    return {key: float(np.mean([metrics[key] for metrics in per_rank])) for key in keys}


def batch_metrics(batch: DataProto) -> dict:
    mask = batch.batch["response_mask"]
    lengths = mask.sum(-1)
    return {
        "critic/score/mean": batch.batch["scores"].mean().item(),
        "critic/rewards/mean": batch.batch["token_level_rewards"].sum(-1).mean().item(),
        "critic/advantages/mean": (batch.batch["advantages"] * mask).sum().item() / max(mask.sum().item(), 1),
        "response_length/mean": lengths.mean().item(),
        "response_length/clip_ratio": (lengths == mask.shape[1]).float().mean().item(),
    }


# (label, metric) shown at the front of the progress line when the step has it: the policy-optimisation kinds'
HEADLINE_METRICS = (
    ("reward", "critic/score/mean"),
    ("len", "response_length/mean"),
    ("pg_loss", "actor/pg_loss"),
    ("rollout_kl", "mismatch/mismatch_kl"),  # engine vs trainer log-probs, not the KL to the reference
    ("val", "val/score/all"),
)


def progress(metrics: dict, concurrent=(), headline=HEADLINE_METRICS) -> str:
    """The step's line: headline metrics (`headline`: (label, metric) pairs, a pipeline's `headline_metrics`), then
    the phases in order; `concurrent` (StepTimer.concurrent): groups of lanes that ran at once, shown as one
    bracket where its first phase ended, e.g. "[reward 0.1s ‖ old_log_probs 0.1s → ref_log_probs 0.1s]" (→: one
    after another in a lane)."""
    parts = [f"{label} {metrics[key]:.3f}" for label, key in headline if key in metrics]
    if metrics.get("weight_sync/checked", 0) > 0:  # the step's weight-sync check ran and passed (a failure raises)
        parts.append("sync ok")
    timings = {  # the phases and the overhead; per-role busy/idle go to the tracker only
        k[len("timing/") :]: v
        for k, v in metrics.items()
        if k.startswith("timing/") and k.count("/") == 1 and k not in ("timing/step", "timing/overlap")
    }
    group_of = {name: group for group in concurrent for lane in group for name in lane if name in timings}
    shown, shown_parts = set(), []
    for name in timings:
        if name in shown:
            continue
        lanes = [[n for n in lane if n in timings] for lane in group_of.get(name, ((name,),))]
        lanes = [lane for lane in lanes if lane]
        shown.update(n for lane in lanes for n in lane)
        text = " ‖ ".join(" → ".join(f"{n} {timings[n]:.1f}s" for n in lane) for lane in lanes)
        shown_parts.append(f"[{text}]" if len(lanes) > 1 else text)
    phases = " ".join(shown_parts)
    return " | ".join(parts) + f" | step {metrics['timing/step']:.1f}s ({phases})"


def fmt(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in metrics.items())


def report_learning_curves(history: dict, output_dir: str) -> str:
    """Writes <output_dir>/learning_curves.png (roll.utils.plots) and prints its path."""
    from roll.utils.plots import write_learning_curves

    path = write_learning_curves(history, output_dir)
    print(f"learning curves: {path}", flush=True)
    return path


REDUCERS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


def reduce_over_ranks(per_rank: list[dict]) -> dict:
    """Each metric over the data-parallel ranks by its name's reducer, as ROLL's reduce_metrics: `name@sum` (or
    `_sum`, also mean/max/min) uses that one, anything else the mean."""
    out = {}
    for key in per_rank[0]:
        tag = key.rpartition("@")[2] if "@" in key else key.rpartition("_")[2]
        out[key] = float(REDUCERS.get(tag, np.mean)([metrics[key] for metrics in per_rank]))
    return out
