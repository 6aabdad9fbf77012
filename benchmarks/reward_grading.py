"""Seconds to grade one demo step's replies (256) in the math reward worker's loop, old path vs new.

    OMP_NUM_THREADS=1 python benchmarks/reward_grading.py [--rows 256] [--repeats 5]

old: every row in its own time-limit thread, math-verify parse + verify (the reward worker before the
exact-match path); threaded: the exact-match path inside the thread; new: boxed-integer replies graded
inline (`grade_rows(..., fast=exact_integer_match)`), others as before. Replies are the demo's format
(`\\boxed{N}`), a tenth of them malformed (those still go to math-verify in a thread).
"""

import argparse
import statistics
import time

from math_verify import parse, verify

from roll.utils.grading import grade_with_time_limit
from roll.utils.math_grader import exact_integer_match, grade_math


def math_verify_only(reply, truth):
    gold, answer = parse(str(truth), parsing_timeout=None), parse(reply, parsing_timeout=None)
    return 1.0 if gold and answer and verify(gold, answer, timeout_seconds=None) else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = [(f"\\boxed{{{i % 9}}}" if i % 10 else f"{i % 9} }}", str((i * 7) % 9)) for i in range(args.rows)]
    math_verify_only("\\boxed{1}", "1")  # math-verify's first-call set-up

    def old():
        return [grade_with_time_limit(math_verify_only, row, 5.0)[0] for row in rows]

    def threaded():
        return [grade_with_time_limit(grade_math, row, 5.0)[0] for row in rows]

    def new():
        out = []
        for row in rows:
            fast = exact_integer_match(*row)
            out.append(fast if fast is not None else grade_with_time_limit(grade_math, row, 5.0)[0])
        return out

    reference = old()
    for name, run in (("old", old), ("threaded", threaded), ("new", new)):
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            scores = run()
            times.append(time.perf_counter() - started)
        assert scores == reference, f"{name} scores differ from math-verify's"
        print(f"{name:>8}: {1000 * statistics.median(times):7.1f} ms per {args.rows} rows (median of {args.repeats})")


if __name__ == "__main__":
    main()
