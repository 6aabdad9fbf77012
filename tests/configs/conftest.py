"""Fixtures of the config tests."""

import logging

import pytest


@pytest.fixture
def config_notes():
    """The messages roll.config logs (its logger writes to stdout and does not propagate, so caplog misses it)."""
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("roll.config")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)
