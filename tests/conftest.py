"""Test tiers (tests/tiers.py) and the session-wide ordering for the suite's one long fixture build.

Every collected test gets its tier's marker (`pytest -m quick` ...); a test with no tier, or with a module
marker that disagrees with the table, stops the collection with its name.

Tests that use the agentic demo model (`agentic_model`, tests/pipeline/conftest.py) run last, and when the
model is not in the build cache yet, it is built in a background process at the lowest CPU priority from
the end of collection on (tests/pipeline/demo_cache.py): the rest of the session leaves a core idle often
enough to hide most of its ~2-3 min warm start.
"""

from pathlib import Path

import pytest

from tests.tiers import TIER_NAMES, tier_of

_prefetch = {}
TESTS = Path(__file__).resolve().parent


def _uses_agentic_model(item) -> bool:
    return "agentic_model" in getattr(item, "fixturenames", ())


def _mark_tiers(items) -> None:
    wrong = []
    for item in items:
        path = Path(str(item.path)).resolve()
        if not path.is_relative_to(TESTS):
            continue  # a test outside tests/ (e.g. a user's own) keeps its markers
        name = getattr(item, "originalname", None) or item.name
        table = tier_of(f"{path.relative_to(TESTS).as_posix()}::{name}")
        own = {mark.name for mark in item.iter_markers() if mark.name in TIER_NAMES}
        tiers = own | ({table} if table else set())
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: {sorted(tiers) or 'no tier'}")
        elif table:
            item.add_marker(table)
    if wrong:
        raise pytest.UsageError(
            "each test needs exactly one tier (quick, engine, e2e, learning, gpu); add its file to TIERS in "
            "tests/tiers.py or fix its pytestmark:\n  " + "\n  ".join(wrong)
        )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these markers
def pytest_collection_modifyitems(config, items):
    _mark_tiers(items)
    items.sort(key=_uses_agentic_model)  # stable: the order within each part is kept


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    users = [item for item in session.items if _uses_agentic_model(item)]
    if users and len(users) < len(session.items):  # other tests run meanwhile
        from tests.pipeline.demo_cache import start_agentic_prefetch

        _prefetch["process"] = start_agentic_prefetch()


def pytest_unconfigure(config):
    process = _prefetch.pop("process", None)
    if process is not None and process.poll() is None:  # e.g. the session was interrupted
        process.terminate()
        process.wait(timeout=30)
