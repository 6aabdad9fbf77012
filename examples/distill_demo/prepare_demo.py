"""Prepare the embedded distillation demo; run it with the held-out accuracy around it.

    python examples/distill_demo/prepare_demo.py --output_dir demo_data/distill [--seed 0] [--force]

Writes <output_dir>/student/model (the RLVR demo's warm-started tiny Qwen2: it answers in the boxed format but
near 0 % correctly), <output_dir>/teacher (a Qwen2 twice as wide, trained on the correct answers of the task's
training phrasings: roll.demo.teacher), train.jsonl / heldout.jsonl (question, answer rows; the held-out phrasings
occur in neither model's training) and prepared.json. Re-running with the same settings does nothing.
`python examples/start_distill_pipeline.py` (no --config_path) calls `run_demo`: prepare when missing, measure,
distil, measure again.
"""

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 threads on 2 busy cores are 10-40x slower

from roll.demo import task as demo_task  # noqa: E402
from roll.demo.rlvr import DemoSettings, greedy_eval, load_model, locked_preparation, prepare_demo  # noqa: E402
from roll.demo.teacher import TeacherSettings, prepare_teacher, teacher_summary  # noqa: E402

DEMO_DIR = "demo_data/distill"  # relative to the working directory, as distill_tiny.yaml's paths
FORMAT_VERSION = 1
REQUIRED = ["student/model/config.json", "teacher/config.json", "train.jsonl", "heldout.jsonl"]


def _rows(problems: list[dict]) -> list[dict]:
    return [{"question": p["prompt"], "answer": demo_task.answer_text(p["ground_truth"])} for p in problems]


def prepare_distill_demo(output_dir=DEMO_DIR, seed: int = 0, force: bool = False, log=print) -> dict:
    """`output_dir` ← student, teacher and rows (the module docstring) unless already prepared with `seed`."""
    student, teacher = DemoSettings(seed=seed), TeacherSettings(seed=seed)
    payload = {
        "format_version": FORMAT_VERSION,
        "student": dataclasses.asdict(student),
        "teacher": dataclasses.asdict(teacher),
    }

    def build(out: Path) -> dict:
        started = time.perf_counter()
        student_summary = prepare_demo(out / "student", student, force=True, log=log)
        prepare_teacher(out / "teacher", teacher, force=True, log=log)
        train, heldout = demo_task.split_problems(seed, student.heldout_phrasings)
        for name, problems in (("train.jsonl", train), ("heldout.jsonl", heldout)):
            with open(out / name, "w") as f:
                f.writelines(json.dumps(row) + "\n" for row in _rows(problems))
        return {
            "train_rows": len(train),
            "heldout_rows": len(heldout),
            "student_parameters": student_summary["parameters"],
            "student_heldout_accuracy": student_summary["heldout_accuracy"],
            "teacher": teacher_summary(out / "teacher"),
            "seconds": round(time.perf_counter() - started, 1),
        }

    return locked_preparation(output_dir, payload, REQUIRED, build, force, log)


def heldout_accuracy(model_dir, demo_dir=DEMO_DIR) -> dict:
    """Greedy held-out accuracy (math-verify) of the model in `model_dir` on the demo's held-out problems."""
    _, heldout = demo_task.split_problems(DemoSettings().seed, DemoSettings().heldout_phrasings)
    model, tokenizer = load_model(str(model_dir))
    return greedy_eval(model, tokenizer, heldout, DemoSettings().eval_max_new_tokens)


def describe(accuracy: dict) -> str:
    return f"{100 * accuracy['accuracy']:.1f}% (well-formed replies {100 * accuracy['format_ok']:.0f}%)"


def run_demo(launch, argv) -> int:
    """The launcher's default path: prepare ./demo_data/distill when missing (one line with how long it took), the
    student's held-out accuracy before, `launch()` (distill_tiny.yaml with `argv`'s overrides), then after."""
    started = time.perf_counter()
    summary = prepare_distill_demo(DEMO_DIR, log=lambda *_: None)
    if not summary["skipped"]:
        print(
            f"prepared the distillation demo in {DEMO_DIR} (student {summary['student_parameters'] / 1e3:.0f}k "
            f"parameters, teacher {summary['teacher']['parameters'] / 1e3:.0f}k, {summary['train_rows']} training / "
            f"{summary['heldout_rows']} held-out rows) in {time.perf_counter() - started:.1f}s",
            flush=True,
        )
    teacher = heldout_accuracy(f"{DEMO_DIR}/teacher")
    before = heldout_accuracy(f"{DEMO_DIR}/student/model")
    print(f"held-out greedy accuracy: teacher {describe(teacher)}, student before {describe(before)}", flush=True)
    code = launch()
    if code != 0:
        return code
    from roll.configs import compose_config, load_config
    from roll.pipeline.distill.config import DistillConfig
    from roll.pipeline.distill.pipeline import final_model_dir

    examples = Path(__file__).resolve().parents[1]
    path, name = DistillConfig.DEFAULT_CONFIG
    config = load_config(DistillConfig, compose_config(str(examples / path), name, [a for a in argv if "=" in a]))
    after = heldout_accuracy(final_model_dir(config))
    print(
        f"held-out greedy accuracy of the student: {describe(before)} before -> {describe(after)} after "
        f"distillation (teacher {describe(teacher)})",
        flush=True,
    )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=DEMO_DIR)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    args = parser.parse_args()
    s = prepare_distill_demo(args.output_dir, args.seed, force=args.force)
    print(
        f"distillation demo in {args.output_dir}: {s['train_rows']} training / {s['heldout_rows']} held-out rows, "
        f"student held-out accuracy {100 * s['student_heldout_accuracy']:.1f}%, teacher "
        f"{100 * s['teacher']['heldout_accuracy']:.1f}%" + (" [cached]" if s["skipped"] else f" [{s['seconds']:.1f}s]")
    )


if __name__ == "__main__":
    main()
