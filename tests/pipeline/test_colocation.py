"""Colocated roles take turns on their devices; separate roles are never offloaded."""

from roll.pipeline.core.colocation import PhaseMemory


class RecordingCluster:  # test double: records offload/reload calls
    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def offload(self):
        self.calls.append(("offload", self.name))

    def reload(self):
        self.calls.append(("reload", self.name))


def test_colocated_roles_are_swapped_and_separate_ones_untouched():
    calls = []
    mappings = {"actor_train": [0, 1], "actor_infer": [0, 1], "reference": [1], "critic": [2]}
    memory = PhaseMemory({n: RecordingCluster(n, calls) for n in mappings}, mappings)
    memory.use("actor_infer")  # generate: the trainer and the reference share devices 0-1 with it
    assert calls == [("offload", "actor_train"), ("offload", "reference")]
    calls.clear()
    memory.use("actor_train")  # old log-probs / train
    assert calls == [("offload", "actor_infer"), ("reload", "actor_train")]
    calls.clear()
    memory.use("actor_train")  # already resident: nothing moves
    memory.use("critic")  # device 2 is its own
    assert calls == []
    memory.use("actor_train", "actor_infer")  # weight sync needs both
    assert calls == [("reload", "actor_infer")]
    calls.clear()
    memory.use("reference")
    assert calls == [("offload", "actor_infer"), ("offload", "actor_train"), ("reload", "reference")]
