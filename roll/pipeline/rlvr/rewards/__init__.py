"""ROLL's dotted paths of its reward workers, each re-exporting roll.workers.rewards."""
