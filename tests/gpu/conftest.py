"""Shared set-up of the GPU tier (tests/gpu/, marker `gpu`): the demo's data and one Ray session on the machine's
GPUs. Every module here skips, with the reason, where CUDA is absent, so the CPU suite collects and skips it.

    pytest -m gpu tests/gpu        # on a CUDA machine; scripts/gpu_check.sh runs it with the carried deps
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

NO_CUDA = "needs a CUDA GPU (torch.cuda.is_available() is False here): run `pytest -m gpu tests/gpu` on a GPU machine"
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
requires_two_gpus = pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason=f"needs 2 CUDA GPUs, this machine has {torch.cuda.device_count()}"
)

# Every role on GPU 0, as a one-GPU user runs the demo (docs/gpu.md), every weight sync verified in full
# (checksums + probe log-probs; the default checks checksums only after each step).
ONE_GPU = [
    "weight_sync_check=full",
    "num_gpus_per_node=1",
    "actor_train.device_mapping=[0]",
    "actor_infer.device_mapping=[0]",
    "reference.device_mapping=[0]",
]


@pytest.fixture(scope="session")
def gpu_demo(tmp_path_factory) -> Path:
    """The RLVR demo's tiny model and data (as tests/pipeline's `demo_dir`: 40 warm-start steps, built on CPU)."""
    from roll.demo.rlvr import DemoSettings
    from tests.pipeline.demo_cache import prepared_demo

    return prepared_demo(tmp_path_factory.mktemp("demo"), DemoSettings(warm_start_steps=40))


@pytest.fixture(scope="session")
def gpu_ray(gpu_demo, tmp_path_factory):
    """One local Ray session on this machine's GPUs (Ray detects them), shared by every pipeline of the tier,
    with the demo config's worker environment (system_envs), as tests/pipeline's `ray_session`."""
    import ray

    from roll.distributed.ray_utils import device_resource, init_ray
    from tests.pipeline.helpers import make_config

    init_ray(num_devices=1, env_vars=make_config(gpu_demo, tmp_path_factory.mktemp("unused")).system_envs)
    assert device_resource() == "GPU", "Ray sees no GPU although torch does: the roles would run on CPU"
    yield
    ray.shutdown()
