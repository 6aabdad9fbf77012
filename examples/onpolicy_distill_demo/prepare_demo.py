"""Prepare the on-policy distillation demo: the RLVR demo's student and data (roll.demo.rlvr) and the teacher
(roll.demo.teacher) in <output_dir>/teacher. Seeded and deterministic; re-running with the same settings does
nothing. examples/start_onpolicy_distill_pipeline.py runs this itself when its default's folder is missing.

    python examples/onpolicy_distill_demo/prepare_demo.py --output_dir demo_data [--force]
"""

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 threads on 2 busy cores are 10-40x slower

from roll.demo.rlvr import DemoSettings, prepare_demo  # noqa: E402
from roll.demo.teacher import TeacherSettings, prepare_teacher, teacher_summary  # noqa: E402


def prepare(output_dir, force: bool = False, log=print) -> dict:
    """<output_dir>: model/ (the student), train.jsonl, heldout.jsonl, teacher/; returns the two summaries and
    `built`: whether anything was (re)built."""
    student = prepare_demo(output_dir, DemoSettings(), force=force, log=log)
    skipped = []  # prepare_teacher says "already prepared" when it has nothing to do
    teacher_dir = Path(output_dir) / "teacher"
    prepare_teacher(teacher_dir, TeacherSettings(), force, lambda line: (skipped.append(line), log(line)))
    built = not (student["skipped"] and any("already prepared" in line for line in skipped))
    return {"student": student, "teacher": teacher_summary(teacher_dir), "built": built}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    args = parser.parse_args()
    started = time.perf_counter()
    s = prepare(args.output_dir, args.force)
    print(
        f"demo data in {args.output_dir} ({time.perf_counter() - started:.0f} s): student "
        f"{s['student']['parameters'] / 1e3:.0f}k parameters, held-out greedy accuracy "
        f"{100 * s['student']['heldout_accuracy']:.1f}%; teacher {s['teacher']['parameters'] / 1e3:.0f}k "
        f"parameters, held-out greedy accuracy {100 * s['teacher']['heldout_accuracy']:.1f}%"
    )


if __name__ == "__main__":
    main()
