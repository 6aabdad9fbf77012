"""vLLM's "<layer>: Failed to load weights" on every weight update is silenced for exactly the layers a
trainer never sends a tensor for (tied output layer, buffer-only rotary cache); for any other layer it
still shows. Runs without an engine: the filter works on a module tree and on log records."""

import logging

import torch

from roll.strategies.vllm_infer import RELOAD_LOGGER, ExpectedReloadWarnings, layers_without_trainer_tensors


class Rotary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cos_sin_cache", torch.ones(4, 2))


class LMHead(torch.nn.Module):
    def __init__(self, embedding: torch.nn.Embedding):
        super().__init__()
        self.weight = embedding.weight  # tied


class Model(torch.nn.Module):
    def __init__(self, tied: bool):
        super().__init__()
        self.embed = torch.nn.Embedding(8, 4)
        self.rotary = Rotary()
        self.proj = torch.nn.Linear(4, 4)
        self.head = LMHead(self.embed) if tied else torch.nn.Linear(4, 8)


def record(layer: str) -> logging.LogRecord:
    return logging.LogRecord(RELOAD_LOGGER, logging.WARNING, "layerwise.py", 266, "%s: Failed to load weights",
                             (layer,), None)  # fmt: skip


def test_expected_layers():
    assert layers_without_trainer_tensors(Model(tied=True)) == {"LMHead", "Rotary"}
    assert layers_without_trainer_tensors(Model(tied=False)) == {"Rotary"}  # an untied head gets its tensor


def test_filter_drops_only_expected_layers():
    keep = ExpectedReloadWarnings(layers_without_trainer_tensors(Model(tied=True)))
    assert not keep.filter(record("LMHead")) and not keep.filter(record("Rotary"))
    assert keep.filter(record("QKVParallelLinear")), "a layer that should have received weights must still warn"
    other = logging.LogRecord(RELOAD_LOGGER, logging.WARNING, "x", 1, "something else %s", ("LMHead",), None)
    assert keep.filter(other)
