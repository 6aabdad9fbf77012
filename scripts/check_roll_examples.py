"""Run `--dry_run` on every in-scope example YAML of a ROLL checkout, unedited, and record pass / refused + reason.

    python scripts/check_roll_examples.py --roll_repo /path/to/ROLL [--rev HEAD] [--write-doc]

--roll_repo is a ROLL git repository (bare or not). The examples are exported with `git archive` into a temporary
directory (nothing of ROLL's is written into this repository) and each one goes through the launcher's own
dry run (`roll.cli.launch`) from its own folder, so ROLL's `../config/...` defaults resolve to ROLL's own blocks
as they would for a ROLL user. The scope rule is scripts/roll_examples.py's `scope`; the loader is that of the
kind that claims the file (`kind_of`). --write-doc stores the results in docs/roll_examples.json and regenerates
docs/roll_compatibility.md, whose last table they feed.
"""

import argparse
import contextlib
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from roll.cli import launch  # noqa: E402
from roll.configs import load_config  # noqa: E402
from roll.pipeline.kinds import kind_configs  # noqa: E402
from scripts.roll_examples import RESULTS, scope, summary  # noqa: E402

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


def check_one(path: Path, name: str) -> tuple[str, str]:
    """The launcher's dry run on one unedited file (`name`: its path in ROLL's tree): ("pass", "") or
    (status, reason)."""
    text = path.read_text()
    if not text.strip():
        return BROKEN, "the file is empty"
    missing = _missing_defaults(path, text)
    if missing:
        return BROKEN, f"its defaults name {missing}, which is not in ROLL's tree"
    env = sorted(set(re.findall(r"\$\{oc\.env:(\w+)\}", text)))
    kind = kind_of(text)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = launch(
            ["--config_path", str(path.parent), "--config_name", path.stem, "--dry_run"],
            "", path.parent, "", "", lambda composed: load_config(kind, composed), lambda config: None,
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


def kind_of(text: str) -> type:
    """The config class of the kind a ROLL YAML is: the first kind (the table's order) that claims it, else the
    table's first kind (RLVR, ROLL's default pipeline)."""
    kinds = list(kind_configs().values())
    return next((cls for cls in kinds if cls.claims_roll_example(text)), kinds[0])


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


def export(repo: str, rev: str, into: Path) -> str:
    commit = subprocess.run(["git", "-C", repo, "rev-parse", rev], check=True, capture_output=True, text=True)
    archive = subprocess.run(["git", "-C", repo, "archive", commit.stdout.strip(), "examples"], check=True,
                             capture_output=True)  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return commit.stdout.strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roll_repo", required=True, help="a ROLL git repository (bare or with a work tree)")
    parser.add_argument("--rev", default="HEAD", help="the ROLL revision to check")
    parser.add_argument("--write-doc", action="store_true", help="write docs/roll_examples.json and the page")
    parser.add_argument("--only", nargs="*", default=(), help="check only these paths (examples/...)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        commit = export(args.roll_repo, args.rev, Path(tmp))
        rows = []
        for path in sorted(p.relative_to(tmp).as_posix() for p in Path(tmp).rglob("*.y*ml")):
            if args.only and path not in args.only:
                continue
            excluded = scope(path)
            if excluded is not None:
                rows.append({"path": path, "status": "out of scope", "reason": excluded})
                continue
            with contextlib.redirect_stdout(io.StringIO()):
                status, reason = check_one(Path(tmp) / path, path)
            rows.append({"path": path, "status": status, "reason": reason})
            print(f"{status:<8} {path}" + (f"\n         {reason}" if reason else ""), flush=True)
    print(summary(rows))
    if args.write_doc:
        RESULTS.write_text(json.dumps({"roll_commit": commit, "examples": rows}, indent=1, ensure_ascii=False) + "\n")
        from scripts.roll_compat_page import compatibility_page

        (ROOT / "docs" / "roll_compatibility.md").write_text(compatibility_page())
    return 0


if __name__ == "__main__":
    sys.exit(main())
