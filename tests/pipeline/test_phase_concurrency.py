"""Independent phases run at once in lanes; each role's intra-op threads follow what runs beside it
(roll.pipeline.core.concurrency). Unit level: no Ray; the pipeline-level exactness check (overlapped vs one
after another, bit for bit) is in test_resume.py, on the session's uninterrupted run."""

import threading
import time

import pytest
import torch

from roll.distributed.cluster import with_threads
from roll.distributed.data_proto import DataProto
from roll.distributed.decorator import THREADS_KEY, Dispatch, register
from roll.pipeline.core.concurrency import ThreadPlan, lane_roles, lanes_by_devices, run_lanes
from roll.pipeline.core.metrics import progress
from roll.utils.progress import StepTimer

DEMO_DEVICES = {"actor_train": {0}, "reference": {0}, "actor_infer": {1}, "critic": {1}}


def phase(name, roles, seconds=0.0, log=None, error=None):
    def call():
        if log is not None:
            log.append((name, "start", threading.current_thread().name))
        time.sleep(seconds)
        if error is not None:
            raise error
        if log is not None:
            log.append((name, "end", threading.current_thread().name))

    return (name, roles, call)


def test_roles_sharing_a_device_share_a_lane_in_order():
    phases = [
        phase("old_log_probs", "actor_train"),
        phase("sum_pi_squared", "actor_train"),
        phase("ref_log_probs", "reference"),  # device 0, like the trainer: after it
        phase("values", "critic"),  # device 1: its own lane
        phase("reward", frozenset({"rewards.math", "rewards.code"})),  # no device
    ]
    lanes = lanes_by_devices(phases, DEMO_DEVICES)
    assert [[name for name, _, _ in lane] for lane in lanes] == [
        ["old_log_probs", "sum_pi_squared", "ref_log_probs"],
        ["values"],
        ["reward"],
    ]
    assert lane_roles(lanes) == [{"actor_train", "reference"}, {"critic"}, {"rewards.math", "rewards.code"}]
    # a phase whose roles join two lanes merges them (the earlier lane's phases first)
    merged = lanes_by_devices(
        [*phases[3:4], *phases[2:3], phase("both", frozenset({"actor_train", "critic"}))], DEMO_DEVICES
    )
    assert [[name for name, _, _ in lane] for lane in merged] == [["values", "ref_log_probs", "both"]]


def test_lanes_run_at_once_and_the_timer_counts_the_overlap():
    log, timer = [], StepTimer()
    lanes = [[phase("a1", "x", 0.2, log), phase("a2", "x", 0.1, log)], [phase("b", "y", 0.3, log)]]
    started = time.perf_counter()
    run_lanes(lanes, timer)
    wall = time.perf_counter() - started
    assert wall < 0.5  # one after another: 0.6 s
    assert [event for event in log if event[0].startswith("a")][:2] == [
        ("a1", "start", log[0][2]),
        ("a1", "end", log[0][2]),
    ]
    assert log.index(("a1", "end", log[0][2])) < log.index(next(e for e in log if e[:2] == ("a2", "start")))
    assert timer.concurrent == [(("a1", "a2"), ("b",))]
    assert timer.timings["timing/overlap"] == pytest.approx(0.6 - wall, abs=0.05)
    assert {k: round(v, 1) for k, v in timer.timings.items() if k != "timing/overlap"} == {
        "timing/a1": 0.2,
        "timing/a2": 0.1,
        "timing/b": 0.3,
    }


def test_sequential_lanes_and_errors():
    log, timer = [], StepTimer()
    run_lanes([[phase("a", "x", 0, log)], [phase("b", "y", 0, log)]], timer, parallel=False)
    assert [e[:2] for e in log] == [("a", "start"), ("a", "end"), ("b", "start"), ("b", "end")]
    assert timer.concurrent == [] and "timing/overlap" not in timer.timings
    log.clear()  # a failing lane raises, but only after the other lane has ended (nothing left running)
    with pytest.raises(RuntimeError, match="grader down"):
        run_lanes([[phase("a", "x", 0, log, RuntimeError("grader down"))], [phase("b", "y", 0.2, log)]], StepTimer())
    assert ("b", "end") in [e[:2] for e in log]


class Stand:  # test double of a Cluster: what ThreadPlan reads and sets
    def __init__(self, world_size=1, envs=None):
        self.world_size, self.threads = world_size, None
        self.worker_config = type("WorkerConfig", (), {"system_envs": envs or {}})()


def plan(background=(), cpus=2, **extra):
    clusters = {
        "actor_train": Stand(),
        "reference": Stand(),
        "actor_infer": Stand(),
        "rewards.math": Stand(),
        **extra,
    }
    placements = [{"node_id": "n0", "cpus": cpus} for c in clusters.values() for _ in range(c.world_size)]
    return ThreadPlan(clusters, placements, background), clusters


def test_a_phase_alone_gets_every_core_and_concurrent_ones_share_them():
    threads, clusters = plan(critic=Stand(envs={"OMP_NUM_THREADS": "1"}))
    threads.enter({"actor_infer"})  # generation runs alone
    assert clusters["actor_infer"].threads == 2
    with threads.together([{"actor_train", "reference"}, {"rewards.math"}]):  # trainer → reference ‖ grader
        assert [clusters[r].threads for r in ("actor_train", "reference", "rewards.math")] == [1, 1, 1]
        threads.enter({"rewards.math"})  # the grader's own call inside the block keeps the block's share
        assert clusters["rewards.math"].threads == 1
    threads.enter({"actor_train"})  # train alone
    assert clusters["actor_train"].threads == 2
    threads.enter({"critic"})  # its own system_envs OMP_NUM_THREADS wins
    assert clusters["critic"].threads is None
    threads.enter({"actor_train"}, {"actor_infer"})  # weight sync: both at once
    assert clusters["actor_train"].threads == clusters["actor_infer"].threads == 1


def test_background_roles_always_count_and_nodes_are_counted_apart():
    threads, clusters = plan(background={"actor_infer", "rewards.math"}, cpus=8)
    threads.enter({"actor_train"})  # beside an async engine and grader: 8 cores / 3 workers
    assert clusters["actor_train"].threads == 2
    threads, clusters = plan(cpus=8, actor_train=Stand(world_size=4))
    threads.enter({"actor_train"})  # four ranks on one 8-core node
    assert clusters["actor_train"].threads == 2


class ThreadProbe:  # test double of a worker method: applies the threads as every registered call does
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def call(self, batch):
        return torch.get_num_threads()


def test_threads_travel_in_meta_info_and_the_worker_applies_them():
    batch = DataProto.from_dict({"x": torch.zeros(2)}, meta_info={"temperature": 1.0})
    sent = with_threads(batch, 2)
    assert sent.meta_info == {"temperature": 1.0, THREADS_KEY: 2} and THREADS_KEY not in batch.meta_info
    assert THREADS_KEY not in with_threads(sent, None).meta_info  # a role without a plan gets no stale value
    assert with_threads(batch, None) is batch and with_threads(3, 2) == 3
    before = torch.get_num_threads()
    try:
        assert ThreadProbe().call(with_threads(batch, 2)) == 2
        assert ThreadProbe().call(batch) == 2  # no setting: the worker keeps the last one
    finally:
        torch.set_num_threads(before)


def test_progress_line_shows_concurrent_lanes():
    metrics = {
        "timing/generate": 0.14,
        "timing/old_log_probs": 0.07,
        "timing/ref_log_probs": 0.09,
        "timing/reward": 0.07,
        "timing/overlap": 0.07,
        "timing/train": 0.24,
        "timing/step": 0.62,
    }
    line = progress(metrics, [(("old_log_probs", "ref_log_probs"), ("reward",))])
    assert line.endswith("(generate 0.1s [old_log_probs 0.1s → ref_log_probs 0.1s ‖ reward 0.1s] train 0.2s)")
    assert "overlap" not in line
