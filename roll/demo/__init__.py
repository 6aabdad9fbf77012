"""The demos' tiny models, tokenizers, tasks and warm starts, built in code (no model hub)."""
