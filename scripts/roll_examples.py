"""ROLL's own example YAMLs: which are in scope, and the table of results.

scripts/check_roll_examples.py dry-runs every in-scope example of a ROLL checkout through the launcher and stores
the results in docs/roll_examples.json; `examples_section` renders them into docs/roll_compatibility.md.
"""

import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "roll_examples.json"

# The scope rule: a file under examples/ is checked unless it is one of ROLL's shared blocks (included by other
# files, not run alone) or belongs to a pipeline roll does not build: (pattern, reason, the kind that would take
# it); an entry whose kind is in roll's table of kinds (roll/pipeline/kinds.py) no longer applies. First match wins.
OUT_OF_SCOPE = [
    (r"^examples/config/", "a block included by other examples (../config/...), not a pipeline config", None),
    (r"sft", "SFT pipeline (start_sft_pipeline.py)", "sft"),
    (r"dpo", "DPO pipeline (start_dpo_pipeline.py)", "dpo"),
    (r"onpolicy[-_]distill", "distillation pipeline (start_distill*_pipeline.py)", "onpolicy_distill"),
    (r"(?<!onpolicy-)(?<!onpolicy_)distill", "distillation pipeline (start_distill*_pipeline.py)", "distill"),
    (r"(-vl-|_vl|vl_|omni|video)", "vision/audio-language pipeline (start_rlvr_vl_pipeline.py or a VL env)", "rlvr_vl"),
    (r"^examples/qwen3\.5-[^/]*rlvr", "Qwen3.5 is multimodal: ROLL runs its RL in start_rlvr_vl_pipeline", "rlvr_vl"),
    (r"^examples/agentic_deepeyes/", "DeepEyes: a vision-language agent (Qwen2.5-VL, image tools)", "agentic_vl"),
]


def scope(path: str) -> str | None:
    """None for an in-scope example; else why it is out of scope."""
    from roll.pipeline.kinds import KINDS

    for pattern, reason, kind in OUT_OF_SCOPE:
        if (kind is None or kind not in KINDS) and re.search(pattern, path):
            return reason
    return None


def summary(rows: list) -> str:
    counts: dict = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


def load_results() -> dict | None:
    return json.loads(RESULTS.read_text()) if RESULTS.is_file() else None


def _cell(text: str, limit: int = 240) -> str:
    """One table cell: each '; '-separated message cut at `limit` characters (docs/roll_examples.json has them
    whole), bars escaped."""
    parts = [" ".join(part.split()) for part in text.split("; ")]
    parts = [part if len(part) <= limit else part[: limit - 1] + "…" for part in parts]
    return "; ".join(parts).replace("|", "\\|")


def examples_section(results: dict | None) -> list[str]:
    """The generated table of ROLL's own examples (docs/roll_examples.json, written by
    scripts/check_roll_examples.py --write-doc)."""
    lines = ["", "## ROLL's own example YAMLs", ""]
    if results is None:
        return lines + ["Not checked yet: run `python scripts/check_roll_examples.py --roll_repo PATH --write-doc`."]
    rows = results["examples"]
    checked = [row for row in rows if row["status"] != "out of scope"]
    from roll.pipeline.kinds import KINDS

    lines += [
        f"Every example YAML of ROLL at commit `{results['roll_commit']}`, run unedited through `--dry_run` by",
        "`python scripts/check_roll_examples.py --roll_repo PATH --write-doc` (from each file's own folder, so ROLL's",
        "`../config/...` blocks are ROLL's). In scope: the configs of the pipeline kinds roll has",
        f"({', '.join(KINDS)}: roll/pipeline/kinds.py); out of scope: ROLL's shared blocks and the kinds roll does",
        "not have yet (the rule is `scripts/roll_examples.py`'s OUT_OF_SCOPE).",
        f"Result: {summary(checked)} of {len(checked)} in scope; {len(rows) - len(checked)} out of scope.",
        "",
        "| ROLL example | result | reason |",
        "|---|---|---|",
    ]
    lines += [f"| `{row['path']}` | {row['status']} | {_cell(row['reason'])} |" for row in rows]
    return lines
