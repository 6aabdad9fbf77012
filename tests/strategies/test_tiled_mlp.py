"""Tiled MLP (fsdp2 apply_tiled_mlp / tiled_num_shards), single process on the tiny Qwen2: the tiled model's
logits and parameter gradients against the untiled one, padded and packed, with and without activation
checkpointing. The FSDP2 run (tiling on vs off, 2 ranks) is in test_train_strategies.py.

Tolerances (float32): logits max |Δ| ≤ 1e-6, parameter gradients max |Δ| ≤ 1e-6.
"""

import pytest
import torch

from roll.strategies.batching import hf_logits
from roll.strategies.fsdp2_train import resolve_fsdp2_config
from roll.strategies.tiled_mlp import enable_tiled_mlp
from tests.strategies import harness as h

ATOL = 1e-6


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model_dir, data_file = h.prepare(tmp_path_factory.mktemp("tiled_mlp"))
    return model_dir, torch.load(data_file)[0]


def _logits_and_grads(model, batch, packing: bool):
    from roll.workers.actor_worker import ActorWorker

    model.zero_grad(set_to_none=True)
    logits = hf_logits(model, batch, "cpu", packing)
    loss, _ = ActorWorker._policy_loss(None, batch, logits)
    loss.backward()
    return logits.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("checkpointing", (False, True))
def test_tiled_mlp_equals_the_untiled_model(tiny, checkpointing):
    from transformers import AutoModelForCausalLM

    model_dir, tensors = tiny
    batch = h.as_proto(tensors, slice(0, 6))
    models = [AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32) for _ in range(2)]
    assert enable_tiled_mlp(models[1], 3) == [f"model.layers.{i}.mlp" for i in range(2)]
    for model in models:
        model.train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    calls = []
    handle = models[1].model.layers[0].mlp.gate_proj.register_forward_hook(lambda *_: calls.append(1))
    for packing in (False, True):
        (plain, plain_grads), (tiled, tiled_grads) = (_logits_and_grads(m, batch, packing) for m in models)
        assert (plain - tiled).abs().max() <= ATOL, packing
        assert max((plain_grads[k] - tiled_grads[k]).abs().max().item() for k in plain_grads) <= ATOL, packing
        assert all(g.abs().sum() > 0 for k, g in tiled_grads.items() if ".mlp." in k)
    handle.remove()
    # the projections really ran in 3 chunks per pass: forward, backward's recomputation (and checkpointing's
    # rerun of the forward), for the padded and the packed batch
    assert len(calls) == 2 * 3 * (3 if checkpointing else 2)


def test_tiled_mlp_tiles_only_rolls_classes():
    """ROLL patches the dense SwiGLU classes only; a Qwen3-MoE's sparse layers (fused experts) stay untiled."""
    assert enable_tiled_mlp(h.tiny_qwen3_moe(), 2) == ["model.layers.0.mlp"]
    assert enable_tiled_mlp(torch.nn.Sequential(torch.nn.Linear(4, 4)), 4) == []


@pytest.mark.parametrize("bad", (0, -1, 2.5, True, "4"))
def test_tiled_num_shards_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="tiled_num_shards"):
        resolve_fsdp2_config({"apply_tiled_mlp": True, "tiled_num_shards": bad}, "float32")


def test_tiled_keys_resolve_with_rolls_default():
    assert resolve_fsdp2_config({"apply_tiled_mlp": True}, "float32")["tiled_num_shards"] == 4
    with pytest.raises(ValueError, match="apply_tiled_mlp"):
        resolve_fsdp2_config({"apply_tiled_mlp": "yes"}, "float32")
