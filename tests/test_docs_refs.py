"""References to the maths reference stay inside the repository and resolve.

The formulas live in docs/algorithms.md (§1–§6, §8–§10) and docs/rollout_correction.md (§7.1–§7.6), one
numbering over both pages. A section is a heading ending in "(§N)" or "(§N.M)", or a numbered list item
"k. ..." directly under such a heading (§N.k). Code, tests and other docs cite them as
"docs/algorithms.md §5.1, §9.10–9.11"; the two pages may also cite each other's sections bare ("§7.3").
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED_DIRS = ("roll", "docs", "examples", "tests", "benchmarks", "scripts")
SCANNED_FILES = ("README.md", "pyproject.toml")
PAGES = ("algorithms.md", "rollout_correction.md")
# Split so this file does not match itself.
OUTSIDE = ("shared" + "/spec", ".." + "/shared", "rl_algorithms" + ".md", "roll_semantics" + ".md")
THIS_FILE = Path(__file__).resolve()

NUMBER = r"\d+(?:\.\d+)*"
ONE_REF = rf"§({NUMBER})(?:\s*[–-]\s*§?({NUMBER}))?"
CHAIN = rf"§{NUMBER}(?:\s*[–-]\s*§?{NUMBER})?(?:(?:\s*,\s*|\s+and\s+)§{NUMBER}(?:\s*[–-]\s*§?{NUMBER})?)*"
QUALIFIED = re.compile(rf"(?:docs/)?({'|'.join(re.escape(p) for p in PAGES)})\s+({CHAIN})")
HEADING = re.compile(rf"^#{{1,6}} .*\(§({NUMBER})\)\s*$")
LIST_ITEM = re.compile(r"^(\d+)\. ")


def scanned_files():
    paths = [ROOT / name for name in SCANNED_FILES if (ROOT / name).is_file()]
    for directory in SCANNED_DIRS:
        paths += [p for p in sorted((ROOT / directory).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    for path in paths:
        if path.resolve() == THIS_FILE:
            continue
        try:
            yield path, path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary data


def section_ids(text: str) -> list[str]:
    ids, current, in_code = [], None, False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif in_code:
            continue
        elif line.startswith("#"):
            match = HEADING.match(line)
            current = match.group(1) if match else None
            if match:
                ids.append(current)
        elif current is not None and (match := LIST_ITEM.match(line)):
            ids.append(f"{current}.{match.group(1)}")
    return ids


def page_sections() -> dict[str, set[str]]:
    return {page: set(section_ids((ROOT / "docs" / page).read_text(encoding="utf-8"))) for page in PAGES}


def expand(start: str, end: str | None) -> list[str]:
    """§a or the range §a–b; a range within one parent (5.1–5.3) also names every section in between."""
    if end is None:
        return [start]
    head_a, _, last_a = start.rpartition(".")
    head_b, _, last_b = end.rpartition(".")
    if head_a == head_b and int(last_a) < int(last_b):
        return [f"{head_a}.{k}" if head_a else str(k) for k in range(int(last_a), int(last_b) + 1)]
    return [start, end]


def references(text: str, bare_allowed: bool):
    """(page or None, section, line) for every § in the text; a § that is not part of a reference gives
    (None, None, line), and so does a bare one where bare references are not allowed."""
    covered = []
    for match in QUALIFIED.finditer(text):
        covered.append(match.span())
        line = text.count("\n", 0, match.start()) + 1
        for ref in re.finditer(ONE_REF, match.group(2)):
            for section in expand(*ref.groups()):
                yield match.group(1), section, line
    for position in (m.start() for m in re.finditer("§", text)):
        if any(start <= position < end for start, end in covered):
            continue
        line = text.count("\n", 0, position) + 1
        ref = re.compile(ONE_REF).match(text, position)
        if ref is None or not bare_allowed:
            yield None, None, line
            continue
        covered.append(ref.span())
        for section in expand(*ref.groups()):
            yield "either page", section, line


def test_no_reference_to_a_specification_outside_the_repository():
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path, text in scanned_files()
        for number, line in enumerate(text.splitlines(), 1)
        if any(needle in line for needle in OUTSIDE)
    ]
    assert not hits, "point these at docs/algorithms.md / docs/rollout_correction.md instead:\n" + "\n".join(hits)


def test_section_numbers_are_unique_across_the_two_pages():
    seen = {}
    for page in PAGES:
        for section in section_ids((ROOT / "docs" / page).read_text(encoding="utf-8")):
            assert section not in seen, f"§{section} is defined in {seen[section]} and again in {page}"
            seen[section] = page


def test_the_pages_define_the_sections_the_code_relies_on():
    sections = page_sections()
    for expected in ("1", "2", "2.10", "3", "4", "4.1", "5", "5.8", "6", "7", "8", "9", "9.16", "10"):
        assert expected in sections["algorithms.md"], f"docs/algorithms.md lost §{expected}"
    for expected in ("7.1", "7.2", "7.3", "7.4", "7.5", "7.6"):
        assert expected in sections["rollout_correction.md"], f"docs/rollout_correction.md lost §{expected}"


def test_every_section_reference_resolves():
    sections = page_sections()
    both = sections[PAGES[0]] | sections[PAGES[1]]
    problems, count = [], 0
    for path, text in scanned_files():
        bare_allowed = path.parent == ROOT / "docs" and path.name in PAGES
        for page, section, line in references(text, bare_allowed):
            where = f"{path.relative_to(ROOT)}:{line}"
            if page is None:
                problems.append(f"{where}: a § that does not name its page (write 'docs/algorithms.md §N.M')")
            elif section not in (both if page == "either page" else sections[page]):
                problems.append(f"{where}: §{section} is not a section of {page}")
            else:
                count += 1
    assert not problems, "\n".join(problems)
    assert count > 50  # the parser still finds the references


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see docs/algorithms.md §5.1–5.3, §9.10", {("algorithms.md", s) for s in ("5.1", "5.2", "5.3", "9.10")}),
        (
            "docs/rollout_correction.md §7.6; docs/algorithms.md §9.16",
            {("rollout_correction.md", "7.6"), ("algorithms.md", "9.16")},
        ),
        ("spec §7", {(None, None)}),
    ],
)
def test_the_reference_parser(text, expected):
    assert {(page, section) for page, section, _ in references(text, bare_allowed=False)} == expected
