"""`learning_curves.png` at the end of a run: reward, held-out score, KL and step time per step."""

from pathlib import Path

# First key present wins: the KL to the reference when a KL loss is on, else the reward's KL penalty, else the
# PPO ratio's KL estimate.
KL_KEYS = {
    "actor/kl_loss": "KL loss to the reference",
    "actor/reward_kl_penalty": "reward KL penalty (to the reference)",
    "actor/ppo_kl": "PPO KL (trainer vs rollout policy)",
    "mismatch/mismatch_kl": "rollout mismatch KL (engine vs trainer)",
}


def write_learning_curves(history: dict, output_dir: str) -> str:
    """Plots run()'s history (steps 1-based, validation before training at step 0) into
    <output_dir>/learning_curves.png; returns the path."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a training machine
    import matplotlib.pyplot as plt

    steps = sorted(history["steps"])
    metrics = [history["steps"][s] for s in steps]
    x = [s + 1 for s in steps]

    def series(key):
        points = [(xi, m[key]) for xi, m in zip(x, metrics) if key in m]
        return [p[0] for p in points], [p[1] for p in points]

    held_out = series("val/score/all")
    if "val/score/all" in (history.get("before") or {}):
        held_out = ([0, *held_out[0]], [history["before"]["val/score/all"], *held_out[1]])
    kl_key = next((k for k in KL_KEYS if any(k in m for m in metrics)), None)
    panels = [
        ("mean score of the step's training samples", "critic/score/mean", series("critic/score/mean")),
        ("held-out score", "val/score/all", held_out),
        (KL_KEYS.get(kl_key, "KL"), kl_key or "no KL metric logged", series(kl_key) if kl_key else ([], [])),
        ("step time (s)", "timing/step", series("timing/step")),
    ]
    figure, axes = plt.subplots(2, 2, figsize=(10, 7))
    for axis, (title, key, (xs, ys)) in zip(axes.flat, panels):
        axis.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3)
        axis.set_title(f"{title}\n{key}", fontsize=9)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    figure.tight_layout()
    path = Path(output_dir) / "learning_curves.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return str(path.resolve())
