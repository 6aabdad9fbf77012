import io
import logging

import pytest


@pytest.fixture
def roll_log():
    """What roll's loggers write during the test (they print to stdout and do not propagate to the root)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    loggers = [logging.getLogger(name) for name in ("roll", "roll.checkpoint", "roll.pipeline", "roll.cluster")]
    for logger in loggers:
        logger.addHandler(handler)
    yield stream
    for logger in loggers:
        logger.removeHandler(handler)
