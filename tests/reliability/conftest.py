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


@pytest.fixture(scope="module")
def small_demo(tmp_path_factory):
    """The RLVR demo's model and data without the warm start (~2 s): enough for every start-up check."""
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from roll.demo.rlvr import DemoSettings, prepare_demo

    directory = tmp_path_factory.mktemp("demo")
    prepare_demo(directory, DemoSettings(warm_start_steps=0), log=lambda *_: None)
    return directory


@pytest.fixture(scope="module")
def ray_for_module(small_demo):
    """A Ray session with the demo's 2 virtual devices: the running one if a session exists, else one that
    this module starts and stops."""
    import ray

    from roll.distributed.ray_utils import init_ray
    from tests.pipeline.helpers import make_config

    started = not ray.is_initialized()
    init_ray(num_devices=2, env_vars=make_config(small_demo, small_demo / "unused").system_envs)
    yield
    if started:
        ray.shutdown()
