"""Session-wide ordering for the suite's one long fixture build.

Tests that use the agentic demo model (`agentic_model`, tests/pipeline/conftest.py) run last, and when the
model is not in the build cache yet, it is built in a background process at the lowest CPU priority from
the end of collection on (tests/pipeline/demo_cache.py): the rest of the session leaves a core idle often
enough to hide most of its ~2-3 min warm start.
"""

import pytest

_prefetch = {}


def _uses_agentic_model(item) -> bool:
    return "agentic_model" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
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
