"""Colocated roles take turns on their devices; separate roles are never offloaded."""

import pytest

from roll.pipeline.core.colocation import PhaseMemory


class RecordingCluster:  # test double: records offload/reload calls
    def __init__(self, name, calls, frees=True):
        self.name, self.calls, self.frees = name, calls, frees

    def offload_frees_memory(self):
        self.calls.append(("asked", self.name))
        return [self.frees]

    def offload(self):
        self.calls.append(("offload", self.name))

    def reload(self):
        self.calls.append(("reload", self.name))


def test_colocated_roles_are_swapped_and_separate_ones_untouched():
    calls = []
    mappings = {"actor_train": [0, 1], "actor_infer": [0, 1], "reference": [1], "critic": [2]}
    memory = PhaseMemory({n: RecordingCluster(n, calls) for n in mappings}, mappings)
    memory.use("actor_infer")  # generate: the trainer and the reference share devices 0-1 with it
    assert calls == [
        ("asked", "actor_train"),
        ("offload", "actor_train"),
        ("asked", "reference"),
        ("offload", "reference"),
    ]
    calls.clear()
    memory.use("actor_train")  # old log-probs / train
    assert calls == [("asked", "actor_infer"), ("offload", "actor_infer"), ("reload", "actor_train")]
    calls.clear()
    memory.use("actor_train")  # already resident: nothing moves
    memory.use("critic")  # device 2 is its own
    assert calls == []
    memory.use("actor_train", "actor_infer")  # weight sync needs both
    assert calls == [("reload", "actor_infer")]
    calls.clear()
    memory.use("reference")
    assert calls == [("offload", "actor_infer"), ("offload", "actor_train"), ("reload", "reference")]


def test_a_role_whose_offload_frees_nothing_is_left_alone():
    """hf_infer on a CPU node (its offload is a no-op there): asked once, then neither offloaded nor reloaded."""
    calls = []
    mappings = {"actor_train": [0], "reference": [0]}
    clusters = {
        "actor_train": RecordingCluster("actor_train", calls),
        "reference": RecordingCluster("reference", calls, False),
    }
    memory = PhaseMemory(clusters, mappings)
    for _ in range(3):  # steps: reference log-probs, then train
        memory.use("reference")
        memory.use("actor_train")
    assert calls == [
        ("asked", "actor_train"),
        ("offload", "actor_train"),  # step 1: the trainer makes room
        ("asked", "reference"),
        ("reload", "actor_train"),
        ("offload", "actor_train"),
        ("reload", "actor_train"),
        ("offload", "actor_train"),
        ("reload", "actor_train"),
    ]


def test_engines_say_whether_their_offload_frees_memory(tmp_path):
    from roll.demo.tiny_model import build_tiny_model
    from roll.strategies import create_strategy
    from tests.strategies.test_contracts import StandInWorker, _worker_config

    hf = create_strategy("hf_infer", StandInWorker(_worker_config(build_tiny_model(str(tmp_path / "m"), ["a", "b"]))))
    assert hf.offload_frees_memory() is False  # a CPU node: the weights stay where they are


def test_keep_resident_engines_say_their_offload_is_not_wanted(tmp_path):
    """strategy_config.keep_resident (hf_infer, fsdp2_train): the role answers no, so PhaseMemory never offloads
    it (test_a_role_whose_offload_frees_nothing_is_left_alone); the default keeps today's answer."""
    from roll.demo.tiny_model import build_tiny_model
    from roll.strategies import create_strategy
    from tests.strategies import harness as h

    model = build_tiny_model(str(tmp_path / "m"), ["a", "b"])

    def engine(name, strategy_config):
        return create_strategy(name, h.StandInWorker(h.make_worker_config(model, name, strategy_config, 1, 1, 1), 0, 1))

    assert engine("fsdp2_train", None).offload_frees_memory() is True  # host copies on CPU too
    assert engine("fsdp2_train", {"keep_resident": True}).offload_frees_memory() is False
    assert engine("hf_infer", {"keep_resident": True}).offload_frees_memory() is False
    with pytest.raises(ValueError, match=r"keep_resident='yes': expected true or false"):
        engine("fsdp2_train", {"keep_resident": "yes"}).offload_frees_memory()
