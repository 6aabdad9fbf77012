"""Figures the README states that the code determines: they must follow the code, not a memory of it."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_heldout_split_is_described_as_the_demo_builds_it():
    from roll.demo.rlvr import DemoSettings
    from roll.demo.task import split_problems

    settings = DemoSettings()
    _, heldout = split_problems(settings.seed, settings.heldout_phrasings, settings.balance_answers)
    facts = {row["ground_truth"] for row in heldout}
    phrasings = len(heldout) // 16
    claim = re.search(
        r"held-out accuracy \((\d+) problems: (\d+) phrasings never seen in training × (\d+) facts", README
    )
    assert claim, "README's demo table must say what the held-out split is"
    assert [int(x) for x in claim.groups()] == [len(heldout), phrasings, 16]
    assert phrasings == settings.heldout_phrasings and len(heldout) == 16 * phrasings and len(facts) == 7  # sums 2..8


def test_vllm_logprob_tolerance_is_the_one_the_tests_assert():
    from tests.strategies.test_vllm import FP32_TOLERANCE

    claim = re.search(r"log-probs within ([0-9.e-]+) of HF's \(the tests' tolerance", README)
    assert claim and float(claim.group(1)) == FP32_TOLERANCE


def test_recipe_headers_do_not_call_a_registered_strategy_unimplemented():
    from roll.strategies import _STRATEGIES

    for path in (ROOT / "examples").rglob("*.yaml"):
        header = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
        used = {role.get("strategy_args", {}).get("strategy_name") for role in _roles(path)}
        for name in used & set(_STRATEGIES):
            assert not re.search(rf"`?{name}`? strategy is not implemented", header), f"{path}: {name} is registered"


def _roles(path: Path) -> list[dict]:
    data = yaml.safe_load(path.read_text()) or {}
    return [value for value in data.values() if isinstance(value, dict)] if isinstance(data, dict) else []
