"""Prepare the code-and-judge demo: a tiny policy (writes Python functions, answers word problems) and a tiny
YES/NO judge, both trained from scratch on CPU, and the data (see roll/demo/code_judge.py).

    python examples/tiny_rlvr/prepare_code_judge_demo.py --output_dir code_judge_data [--seed 0] [--force]

Then: python examples/start_rlvr_pipeline.py --config_path tiny_rlvr --config_name rlvr_tiny_code_judge
"""

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 threads on 2 busy cores are 10-40x slower

from roll.demo.code_judge import CodeJudgeDemoSettings, prepare_code_judge_demo  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="code_judge_data")
    parser.add_argument("--seed", type=int, default=CodeJudgeDemoSettings.seed)
    parser.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    args = parser.parse_args()
    s = prepare_code_judge_demo(args.output_dir, CodeJudgeDemoSettings(seed=args.seed), force=args.force)
    print(
        f"code-and-judge demo in {args.output_dir}: train {s['train_rows']}, held-out {s['heldout_rows']} prompts, "
        f"vocab {s['vocab_size']}, two models of {s['parameters'] / 1e3:.0f}k parameters"
        + (" [cached]" if s["skipped"] else f" [{s['seconds']:.0f}s]")
    )
    print(
        f"policy after its format-only warm start, held-out greedy: {100 * s['heldout_code_programs_right']:.1f}% "
        f"right programs ({100 * s['heldout_code_well_formed']:.0f}% well-formed), "
        f"{100 * s['heldout_math_answers_right']:.1f}% right word-problem answers"
    )
    print(f"judge: {100 * s['judge_table_accuracy']:.1f}% right verdicts on its YES/NO table")


if __name__ == "__main__":
    main()
