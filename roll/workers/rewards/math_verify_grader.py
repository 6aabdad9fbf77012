"""Moved to roll.utils.math_grader (the agentic environments grade too); this old path stays importable."""

from roll.utils.math_grader import exact_integer_match, grade, grade_math, last_boxed  # noqa: F401
