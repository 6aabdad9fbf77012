"""A reward plugin whose module raises while it is imported (a backend it needs is missing)."""

raise ImportError("grading backend not installed")
