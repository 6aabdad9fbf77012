"""ROLL's fsdp2 wrap_policy units (wrap_embeddings, wrap_lm_output, moe_experts), one process (gloo, world 1):
the fully_shard units are what the config says, tied embeddings stay one Parameter in one unit, and a training
forward/backward gives the default wrapping's loss and gradients (max |Δ| ≤ 1e-6, float32). The 2-rank training
run with the extra units is in test_train_strategies.py.
"""

import logging

import pytest
import torch

from roll.strategies.batching import hf_logits
from roll.strategies.fsdp2_train import full_tensor, resolve_fsdp2_config, shard_model
from tests.strategies import harness as h

ATOL = 1e-6
LOG = logging.getLogger("roll.tests.fsdp2_units")
BOTH = {"wrap_policy": {"wrap_embeddings": True, "wrap_lm_output": True}}


@pytest.fixture(scope="module")
def world_of_one(tmp_path_factory):
    import torch.distributed as dist

    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model_dir, data_file = h.prepare(tmp_path_factory.mktemp("fsdp2_units"))
    return model_dir, torch.load(data_file)[0]


def _sharded(model_dir_or_model, strategy_config):
    from transformers import AutoModelForCausalLM

    model = model_dir_or_model
    if not isinstance(model, torch.nn.Module):
        model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    config = resolve_fsdp2_config(strategy_config, "float32", world_size=1)
    return shard_model(model, 1, config, torch.device("cpu"), LOG)


def _units(model) -> set[str]:
    from torch.distributed.fsdp import FSDPModule

    return {name for name, module in model.named_modules() if isinstance(module, FSDPModule)}


def _loss_and_grads(model, tensors):
    from roll.workers.actor_worker import ActorWorker

    batch = h.as_proto(tensors, slice(0, 6))
    loss, _ = ActorWorker._policy_loss(None, batch, hf_logits(model, batch, "cpu", False))
    loss.backward()
    return loss.item(), {n: full_tensor(p.grad) for n, p in model.named_parameters()}


def _assert_same_training(a, b, tensors):
    (loss_a, grads_a), (loss_b, grads_b) = _loss_and_grads(a, tensors), _loss_and_grads(b, tensors)
    assert loss_a == pytest.approx(loss_b, abs=ATOL)
    assert grads_a.keys() == grads_b.keys()
    assert max((grads_a[k] - grads_b[k]).abs().max().item() for k in grads_a) <= ATOL


def test_wrap_embeddings_and_lm_output_are_their_own_units(world_of_one, tiny):
    model_dir, tensors = tiny
    default, wrapped = _sharded(model_dir, None), _sharded(model_dir, BOTH)
    layers = {"model.layers.0", "model.layers.1", ""}
    assert _units(default) == layers
    assert _units(wrapped) == layers | {"model.embed_tokens", "lm_head"}
    assert _units(_sharded(model_dir, {"wrap_policy": {"wrap_embeddings": True}})) == layers | {"model.embed_tokens"}
    _assert_same_training(wrapped, default, tensors)


def test_tied_embeddings_stay_one_parameter_in_one_unit(world_of_one, tmp_path, tiny):
    from transformers import AutoModelForCausalLM

    from roll.demo.tiny_model import build_tiny_model

    _, tensors = tiny
    words = [f"w{i}" for i in range(150)] + ["the answer is", "\\boxed{7}", "add", "two", "numbers"]  # h.prepare's
    tied_dir = build_tiny_model(
        str(tmp_path / "tied"), words, hidden_size=64, num_layers=2, seed=3, tie_word_embeddings=True
    )
    for policy in (BOTH, {"wrap_policy": {"wrap_lm_output": True}}):
        wrapped, default = _sharded(tied_dir, policy), _sharded(tied_dir, None)
        assert wrapped.lm_head.weight is wrapped.model.embed_tokens.weight
        # one unit holds both modules: fully_shard of the pair makes each an FSDPModule sharing one state
        assert {"model.embed_tokens", "lm_head"} <= _units(wrapped)
        assert wrapped.model.embed_tokens._get_fsdp_state() is wrapped.lm_head._get_fsdp_state()
        _assert_same_training(wrapped, default, tensors)
    plain = AutoModelForCausalLM.from_pretrained(tied_dir, dtype=torch.float32)
    assert plain.lm_head.weight is plain.model.embed_tokens.weight


def test_moe_experts_wrapped_only_with_rolls_guard(world_of_one):
    """ROLL wraps moe_experts classes on an MoE model with apply_expert_patch: true; with transformers 5's fused
    experts, Qwen3MoeMLP (ROLL's examples' choice) is the dense layer 0's MLP."""
    policy = {"wrap_policy": {"moe_experts": ["Qwen3MoeMLP"]}}
    guarded = _sharded(h.tiny_qwen3_moe(), {**policy, "apply_expert_patch": True})
    assert _units(guarded) == {"model.layers.0.mlp", "model.layers.0", "model.layers.1", ""}
    assert _units(_sharded(h.tiny_qwen3_moe(), policy)) == {"model.layers.0", "model.layers.1", ""}
    ids = torch.arange(8)[None]
    assert torch.equal(guarded(input_ids=ids).logits, h.tiny_qwen3_moe()(input_ids=ids).logits)


@pytest.mark.parametrize(
    "policy",
    (
        {"wrap_embeddings": "yes"},
        {"wrap_lm_output": 1},
        {"moe_experts": [3]},
        {"wrap_everything": True},
    ),
)
def test_bad_wrap_policy_names_the_key(policy):
    with pytest.raises(ValueError, match="wrap_policy"):
        resolve_fsdp2_config({"wrap_policy": policy}, "float32")
