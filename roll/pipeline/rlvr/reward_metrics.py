"""Step metrics a reward worker reports about its own samples (RewardWorker.record_metric).

A worker returns per-row values; the pipeline keeps, per reward/<domain>/<name>, the running (reduce, sum,
rows) in the scored batch's meta_info["reward_metrics"], so batches scored separately (validation parts,
dynamic-sampling rounds) combine exactly.
"""

from roll.distributed.data_proto import DataProto


def worker_row_metrics(out: DataProto, rows: int, where: str) -> dict:
    """{reward/<where>/<name>: (reduce, sum, rows)} from a reward worker's output of `rows` real rows."""
    found = {}
    for key, values in out.batch.items():
        reduce, _, name = key.partition("/")
        if reduce in ("metric_mean", "metric_sum"):  # [:rows]: without the rows padded for the workers
            found[f"reward/{where}/{name}"] = (reduce, float(values[:rows].double().sum()), rows)
    return found


def merge_worker_metrics(*batches: DataProto) -> dict:
    """The (reduce, sum, rows) entries of several scored batches, added up."""
    totals: dict = {}
    for batch in batches:
        for key, (reduce, total, rows) in batch.meta_info.get("reward_metrics", {}).items():
            _, old_total, old_rows = totals.get(key, (reduce, 0.0, 0))
            totals[key] = (reduce, old_total + total, old_rows + rows)
    return totals


def reduce_worker_metrics(*batches: DataProto, prefix: str = "") -> dict:
    """Means (or sums) of the reward workers' recorded per-row values over these batches' rows."""
    return {
        prefix + key: total / rows if reduce == "metric_mean" else total
        for key, (reduce, total, rows) in merge_worker_metrics(*batches).items()
    }
