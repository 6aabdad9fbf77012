"""Shared set-up of the end-to-end pipeline tests (real Ray + DeepSpeed + HF on CPU).

One demo preparation and one Ray session per test session; each test builds validated configs from
examples/tiny_rlvr/rlvr_tiny.yaml with small batches and runs pipelines in-process, closing each one
so the next can take the (virtual) devices. The demo preparations come from the build cache
(tests/build_cache.py): built once per change of their code or settings, copied into each session.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: 2 threads on 2 cores are 10-40x slower

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tests.pipeline.demo_cache import prepared_agentic_demo, prepared_demo  # noqa: E402
from tests.pipeline.helpers import make_config, uninterrupted_overrides  # noqa: E402


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory) -> Path:
    """Tiny model + data, briefly warm-started (40 steps, ~3 s): sampled replies are mostly well-formed
    `\\boxed{n}` with near-chance answers, so GRPO groups have reward variance."""
    from roll.demo.rlvr import DemoSettings

    return prepared_demo(tmp_path_factory.mktemp("demo"), DemoSettings(warm_start_steps=40))


@pytest.fixture(scope="session")
def ray_session(demo_dir):
    """One Ray session (2 virtual devices) shared by every pipeline of the session."""
    import ray

    from roll.distributed.ray_utils import init_ray

    init_ray(num_devices=2, env_vars=make_config(demo_dir, demo_dir / "unused").system_envs)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def agentic_model(tmp_path_factory) -> Path:
    """The agentic demo's tiny model, prepared exactly as examples/agentic_demo/prepare_demo.py does (~3 min
    when its cache entry is built)."""
    return prepared_agentic_demo(tmp_path_factory.mktemp("agentic_demo")) / "model"


@pytest.fixture(scope="session")
def rlvr_config(demo_dir):
    """`rlvr_config(output_dir, overrides=(), blocks=None, **yaml)`: a validated RLVRConfig from the tiny
    demo YAML (or `config_path`/`config_name`) on the session's demo data with SMALL_RUN batches."""

    def build(output_dir, overrides=(), blocks=None, **yaml):
        return make_config(demo_dir, output_dir, overrides, blocks, **yaml)

    return build


@pytest.fixture(scope="session")
def uninterrupted_run(rlvr_config, ray_session, tmp_path_factory) -> dict:
    """The demo's synchronous run of 4 steps, saving every 2, with its samples and final weights: the reference
    of the resume, the async-rollout and the rollout-replay tests (one run for all). It also dumps its rollouts
    (rollout_mock, mode dump) and logs them (rollout_dump_dir), which changes none of its numbers.
    {"history", "out", "samples", "dumps", "rollout_log"}."""
    from tests.pipeline.helpers import run_pipeline, trained_weights

    root = tmp_path_factory.mktemp("uninterrupted")
    config = rlvr_config(root / "out", uninterrupted_overrides(root / "dumps", "dump") + [
        f"+rollout_dump_dir={root / 'rollout_log'}"
    ])  # fmt: skip
    history = run_pipeline(config, sample_dir=root / "samples", inspect=trained_weights)
    return {"history": history, "out": root / "out", "samples": root / "samples", "dumps": root / "dumps",
            "rollout_log": root / "rollout_log"}  # fmt: skip
