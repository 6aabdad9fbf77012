"""The local Ray the launcher starts while it checks the config (issue 33): `init_ray` takes it for the same
arguments and starts again for others; a run that never took it shuts it down. Ray itself is a test double
here (no processes start); the launcher's side is in tests/reliability/test_launcher.py."""

import time

import pytest
import ray

from roll.distributed import ray_utils


class FakeRay:
    """Records starts and shutdowns instead of starting Ray."""

    def __init__(self, monkeypatch):
        self.running, self.starts, self.shutdowns = None, [], 0
        monkeypatch.setattr(ray_utils, "_early", None)
        monkeypatch.setattr(ray_utils, "existing_cluster_address", lambda: None)
        monkeypatch.setattr(ray_utils, "device_nodes", lambda nodes, per_node: ["node"] * nodes)
        monkeypatch.setattr(ray_utils, "_start_local", self.start)
        monkeypatch.setattr(ray, "is_initialized", lambda: self.running is not None)
        monkeypatch.setattr(ray, "shutdown", self.shutdown)

    def start(self, num_devices, env_vars):
        self.running = (num_devices, env_vars["OMP_NUM_THREADS"])
        self.starts.append(self.running)

    def shutdown(self):
        self.shutdowns += self.running is not None
        self.running = None


@pytest.fixture
def fake_ray(monkeypatch):
    return FakeRay(monkeypatch)


def test_init_ray_takes_the_early_start_for_the_same_arguments(fake_ray):
    assert ray_utils.start_local_ray_early(2, {"OMP_NUM_THREADS": "1"}, 1)
    time.sleep(0.01)
    called = time.perf_counter()
    began, up = ray_utils.init_ray(2, {"OMP_NUM_THREADS": "1"}, 1)
    assert began < up < called  # start-up counts from the early start
    assert fake_ray.starts == [(2, "1")] and fake_ray.shutdowns == 0
    ray_utils.stop_early_ray()  # taken: the run's session stays
    assert fake_ray.running == (2, "1") and fake_ray.shutdowns == 0


@pytest.mark.parametrize("devices, envs, nodes", [(4, {"OMP_NUM_THREADS": "1"}, 1), (2, {"OMP_NUM_THREADS": "2"}, 1)])
def test_other_arguments_start_ray_again(fake_ray, devices, envs, nodes):
    assert ray_utils.start_local_ray_early(2, {"OMP_NUM_THREADS": "1"}, 1)
    called = time.perf_counter()
    assert ray_utils.init_ray(devices, envs, nodes)[0] >= called
    assert fake_ray.shutdowns == 1 and fake_ray.starts == [(2, "1"), (devices, envs["OMP_NUM_THREADS"])]


def test_an_early_start_no_pipeline_took_is_shut_down(fake_ray):
    assert ray_utils.start_local_ray_early(2, {}, 1)
    ray_utils.stop_early_ray()
    assert fake_ray.running is None and fake_ray.shutdowns == 1
    ray_utils.stop_early_ray()  # once only
    assert fake_ray.shutdowns == 1


def test_no_early_start_where_a_cluster_is_given_or_ray_runs(fake_ray, monkeypatch):
    fake_ray.running = (2, "1")  # this process is connected already
    assert not ray_utils.start_local_ray_early(2, {}, 1)
    fake_ray.running = None
    monkeypatch.setattr(ray_utils, "existing_cluster_address", lambda: "10.0.0.1:6379")  # attach instead
    assert not ray_utils.start_local_ray_early(2, {}, 1)
    assert fake_ray.starts == [] and ray_utils._early is None
