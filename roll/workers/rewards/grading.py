"""Moved to roll.utils.grading (the agentic environments grade too); this old path stays importable."""

from roll.utils.grading import ERROR, GRADED, TIMEOUT, RewardDataError, grade_with_time_limit  # noqa: F401
