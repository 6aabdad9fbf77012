"""Run `--dry_run` on every in-scope example YAML of a ROLL checkout, unedited, and record pass / refused + reason.

    python scripts/check_roll_examples.py --roll_repo /path/to/ROLL [--rev HEAD] [--write-doc]

--roll_repo is a ROLL git repository (bare or not). The examples are exported with `git archive` into a temporary
directory (nothing of ROLL's is written into this repository) and each one goes through the launcher's own
dry run (`roll.cli.launch`) from its own folder, so ROLL's `../config/...` defaults resolve to ROLL's own blocks
as they would for a ROLL user. The scope rule is `roll.configs.roll_examples.scope`. --write-doc stores the
results in docs/roll_examples.json and regenerates docs/roll_compatibility.md, whose last table they feed.
"""

import argparse
import contextlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from roll.configs.roll_examples import RESULTS, check_one, scope, summary  # noqa: E402


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
        from roll.configs.roll_compat import compatibility_page

        (ROOT / "docs" / "roll_compatibility.md").write_text(compatibility_page())
    return 0


if __name__ == "__main__":
    sys.exit(main())
