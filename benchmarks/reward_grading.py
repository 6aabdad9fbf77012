"""Seconds to grade one demo step's replies (256) in the math reward worker's loop, old path vs new.

    OMP_NUM_THREADS=1 python benchmarks/reward_grading.py [--rows 256] [--repeats 5]

old: every row in its own time-limit thread, math-verify parse + verify (the reward worker before the
exact-match path); threaded: the exact-match path inside the thread; inline: boxed-integer replies graded
inline, the others each in its own thread; new: the others in one thread for the batch, each row still within
its limit (`grade_rows(..., fast=exact_integer_match)`, roll.utils.grading.grade_each_with_time_limit).
Replies are the demo's format (`\\boxed{N}`), a tenth of them malformed as the
demo's early replies are (those go to math-verify).
"""

import argparse
import statistics
import time

from math_verify import parse, verify

from roll.utils.grading import grade_each_with_time_limit, grade_with_time_limit
from roll.utils.math_grader import exact_integer_match, grade_math

# malformed replies as the demo's policy writes them early in training (from its step-1 samples)
MALFORMED = ["\\boxed{0}1}", "\\boxed{}", "\\boxed{ more}", " and{3}", "\\boxed{*1}", "\\boxed\\boxed{8}", "\\boxed5}"]


def math_verify_only(reply, truth):
    gold, answer = parse(str(truth), parsing_timeout=None), parse(reply, parsing_timeout=None)
    return 1.0 if gold and answer and verify(gold, answer, timeout_seconds=None) else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = [(f"\\boxed{{{i % 9}}}" if i % 10 else MALFORMED[i % 7], str((i * 7) % 9)) for i in range(args.rows)]
    math_verify_only("\\boxed{1}", "1")  # math-verify's first-call set-up

    def old():
        return [grade_with_time_limit(math_verify_only, row, 5.0)[0] for row in rows]

    def threaded():
        return [grade_with_time_limit(grade_math, row, 5.0)[0] for row in rows]

    def inline():
        out = []
        for row in rows:
            fast = exact_integer_match(*row)
            out.append(fast if fast is not None else grade_with_time_limit(grade_math, row, 5.0)[0])
        return out

    def new():
        out = [exact_integer_match(*row) for row in rows]
        slow = [index for index, value in enumerate(out) if value is None]
        for index, (score, _, _) in zip(slow, grade_each_with_time_limit(grade_math, [rows[i] for i in slow], 5.0)):
            out[index] = score
        return out

    reference = old()
    for name, run in (("old", old), ("threaded", threaded), ("inline", inline), ("new", new)):
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            scores = run()
            times.append(time.perf_counter() - started)
        assert scores == reference, f"{name} scores differ from math-verify's"
        print(f"{name:>8}: {1000 * statistics.median(times):7.1f} ms per {args.rows} rows (median of {args.repeats})")


if __name__ == "__main__":
    main()
