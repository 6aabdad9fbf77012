"""What every pipeline kind shares around its rollout: forward-pass maths, weight sync, checkpoints,
colocation turns, metrics and step callbacks."""
