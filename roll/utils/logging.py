"""One logger format for the driver and every Ray worker, readable by a person."""

import logging
import sys

_FORMAT = "%(asctime)s %(levelname).1s [%(name)s] %(message)s"


def get_logger(name: str = "roll", level: int = logging.INFO) -> logging.Logger:
    logger = logging.getLogger(name)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
    return logger
