"""Each reward worker built once in the driver, as its Ray actor will be: the class constructed with the role's
config (rank 0, the role's world size, its system_envs set), then `initialize()` called, unless the worker loads
a model (an LLM judge with model_args: loading it here would cost what the worker's own load costs, and may
need a device; its construction is still checked). A plugin that raises on import, in `__init__` or in
`initialize()` then fails at start-up and at --dry_run with one line naming the key, the class, the error and
where the plugin raised it, instead of a traceback from inside a Ray actor.

The driver's environment, working directory and RNG states are put back afterwards, so the check changes
nothing the run does next.
"""

import os
import traceback
from contextlib import contextmanager

from roll.configs.loader import ConfigError


def check_reward_worker(key: str, cls, worker, system_envs: dict) -> None:
    """`key`: the role's worker_cls key (rewards.<domain>.worker_cls); `worker`: its WorkerConfig."""
    step = f"{cls.__name__}(...)"
    try:
        with _as_in_a_worker({**system_envs, **(worker.system_envs or {})}):
            instance = cls(worker, 0, worker.world_size or 1, ())
            if getattr(worker, "model_args", None) is None:
                step = f"{cls.__name__}.initialize()"
                instance.initialize()
    except Exception as error:  # the user's code: any exception is the message
        raise ConfigError(
            f"'{key}' = '{cls.__module__}.{cls.__qualname__}': {step} raised {type(error).__name__}: "
            f"{_one_line(error)}{raised_at(error)} (checked in the driver before the reward workers start)"
        ) from None


def raised_at(error: BaseException) -> str:
    """' (at file.py line N)': the innermost frame of the traceback outside roll, where a user's code raised."""
    roll_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    frames = traceback.extract_tb(error.__traceback__)
    frames = [f for f in frames if not os.path.abspath(f.filename).startswith(roll_dir + os.sep)]
    if not frames:
        return ""
    return f" (at {frames[-1].filename} line {frames[-1].lineno})"


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:300] + "…" if len(text) > 300 else text or "(no message)"


@contextmanager
def _as_in_a_worker(env: dict):
    import random

    import numpy as np
    import torch

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_rng = random.getstate(), np.random.get_state(), torch.get_rng_state()  # CPU only: no CUDA in the driver
    os.environ.update({str(k): str(v) for k, v in env.items()})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        random.setstate(saved_rng[0])
        np.random.set_state(saved_rng[1])
        torch.set_rng_state(saved_rng[2])
