"""ROLL's own example YAMLs: which are in scope, one dry run each, and the table of results.

scripts/check_roll_examples.py runs `check_one` on every in-scope example of a ROLL checkout and stores the
results in docs/roll_examples.json; `examples_section` renders them into docs/roll_compatibility.md.
"""

import contextlib
import io
import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "roll_examples.json"

# The scope rule: a file under examples/ is checked unless it is one of ROLL's shared blocks (included by other
# files, not run alone) or belongs to a pipeline roll does not build. First match wins.
OUT_OF_SCOPE = [
    (r"^examples/config/", "a block included by other examples (../config/...), not a pipeline config"),
    (r"sft", "SFT pipeline (start_sft_pipeline.py)"),
    (r"dpo", "DPO pipeline (start_dpo_pipeline.py)"),
    (r"distill", "distillation pipeline (start_distill*_pipeline.py)"),
    (r"(-vl-|_vl|vl_|omni|video)", "vision/audio-language pipeline (start_rlvr_vl_pipeline.py or a VL env)"),
    (r"^examples/qwen3\.5-\d", "Qwen3.5 is multimodal: ROLL runs these with start_rlvr_vl_pipeline.py"),
    (r"^examples/agentic_deepeyes/", "DeepEyes: a vision-language agent (Qwen2.5-VL, image tools)"),
]
AGENTIC_KEYS = ("custom_envs", "train_env_manager", "val_env_manager")
BROKEN = "broken in ROLL"
VALID_KEYS = re.compile(r"\s*\(valid keys of [^)]*\)")
# files ROLL's own loader cannot load either, checked against ROLL's source; the dry run must also fail on them
KNOWN_BROKEN = {
    "examples/docs_examples/example_topr.yaml": (
        "placeholders x_1 / x_2 stand where numbers belong: ROLL's type-checked loader (dacite) refuses "
        "use_topr_neg_loss_coef: x_2 too"
    ),
}
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d [A-Z] \[")  # roll's log lines (warnings on ignored keys) on stderr


def scope(path: str) -> str | None:
    """None for an in-scope example; else why it is out of scope."""
    for pattern, reason in OUT_OF_SCOPE:
        if re.search(pattern, path):
            return reason
    return None


def check_one(path: Path, name: str) -> tuple[str, str]:
    """The launcher's dry run on one unedited file (`name`: its path in ROLL's tree): ("pass", "") or
    (status, reason)."""
    from roll.cli import launch
    from roll.configs import load_agentic_config, load_rlvr_config

    text = path.read_text()
    if not text.strip():
        return BROKEN, "the file is empty"
    missing = _missing_defaults(path, text)
    if missing:
        return BROKEN, f"its defaults name {missing}, which is not in ROLL's tree"
    env = sorted(set(re.findall(r"\$\{oc\.env:(\w+)\}", text)))
    agentic = re.search(rf"^({'|'.join(AGENTIC_KEYS)}):", text, re.M) or "envs@_here_" in text
    load = load_agentic_config if agentic else load_rlvr_config
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = launch(
            ["--config_path", str(path.parent), "--config_name", path.stem, "--dry_run"],
            "", path.parent, "", "", load, lambda config: None,
        )  # fmt: skip
    if code == 0:
        return "pass", ""
    text = stderr.getvalue()  # also holds Hydra's warnings and the notes on ignored keys: keep the error only
    error = text[text.find("config error: ") :].removeprefix("config error: ")
    reason = "; ".join(_messages(error))
    if env and any(f"oc.env:{name}" in reason or name in reason for name in env):
        return BROKEN, f"needs the environment variable(s) {', '.join(env)} set before it loads (${{oc.env:...}})"
    known = KNOWN_BROKEN.get(name)
    if known:
        return BROKEN, f"{known}; here: {reason}"
    return "refused", reason


def _messages(error: str) -> list[str]:
    """A config error's messages, one each, without the valid-key lists and the block headers."""
    messages = []
    for line in error.splitlines():
        line = line.strip()
        if not line or LOG_LINE.match(line) or line.startswith("[") or "problems in the config" in line:
            continue
        messages.append(VALID_KEYS.sub("", line.removeprefix("- ")).strip())
    return messages


def _missing_defaults(path: Path, text: str) -> str | None:
    for entry in re.findall(r"^\s*-\s*(\.\./[\w/]+)@", text, re.M):
        if not (path.parent / f"{entry}.yaml").is_file():
            return entry
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
    lines += [
        f"Every example YAML of ROLL at commit `{results['roll_commit']}`, run unedited through `--dry_run` by",
        "`python scripts/check_roll_examples.py --roll_repo PATH --write-doc` (from each file's own folder, so ROLL's",
        "`../config/...` blocks are ROLL's). In scope: RLVR and agentic pipeline configs; out of scope: ROLL's shared",
        "blocks and the SFT, DPO, distillation and vision/audio-language pipelines (the rule is",
        "`roll.configs.roll_examples.OUT_OF_SCOPE`).",
        f"Result: {summary(checked)} of {len(checked)} in scope; {len(rows) - len(checked)} out of scope.",
        "",
        "| ROLL example | result | reason |",
        "|---|---|---|",
    ]
    lines += [f"| `{row['path']}` | {row['status']} | {_cell(row['reason'])} |" for row in rows]
    return lines
