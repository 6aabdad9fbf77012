"""Watches a training strategy's offload() / reload() from outside: every parameter, gradient and optimizer
tensor the engine holds — found through the engine's own objects (module parameters, ZeRO-3 partitions,
`main_grad`s, each torch optimizer's param groups and state under DeepSpeed's / megatron's wrappers), not
through roll's offload code — must leave the compute device's memory at offload and come back at reload.

"Left" is observed, not assumed: on a GPU the tensor is on another device; on a CPU-only machine, where
the host is the compute device, its storage was freed (0 bytes) or replaced by another allocation
(DeepSpeed's re-linked host buffers). A strategy whose offload returns early leaves every tensor where
it was and fails. After reload: on the compute device, memory allocated, values bit-identical.
"""

import torch
import torch.distributed as dist


def _local(tensor):
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor  # DTensor → this rank's shard


def _torch_optimizers(optimizer) -> list:
    """The torch optimizers under DeepSpeed's ZeRO wrappers and megatron's (chained) optimizers."""
    if optimizer is None:
        return []
    if isinstance(optimizer, torch.optim.Optimizer):
        return [optimizer]
    if hasattr(optimizer, "chained_optimizers"):
        return [inner for part in optimizer.chained_optimizers for inner in _torch_optimizers(part)]
    return _torch_optimizers(getattr(optimizer, "optimizer", None))


def engine_tensors(strategy) -> dict[str, tuple[str, torch.Tensor]]:
    """{stable key: (group, tensor)} for every parameter, gradient and optimizer tensor of the engine."""
    out = {}
    for name, param in strategy.model.named_parameters():
        if getattr(param, "ds_tensor", None) is not None:  # ZeRO-3: the partition holds the weights; the
            out[f"partition {name}"] = ("parameters", param.ds_tensor)  # gathered copy is a cache
        else:
            out[f"param {name}"] = ("parameters", _local(param))
        for attribute in ("grad", "main_grad"):
            value = getattr(param, attribute, None)
            if value is not None:
                out[f"{attribute} {name}"] = ("gradients", _local(value))
    for i, optimizer in enumerate(_torch_optimizers(getattr(strategy, "optimizer", None))):
        for g, group in enumerate(optimizer.param_groups):
            for j, param in enumerate(group["params"]):
                out[f"optimizer {i} group {g} param {j}"] = ("optimizer", _local(param))
        # by state (ZeRO-3 keeps its fp32 partitions out of param_groups between steps: they key the state)
        for j, (param, state) in enumerate(optimizer.state.items()):
            out[f"optimizer {i} state {j}"] = ("optimizer", _local(param))
            for key, value in state.items():
                if torch.is_tensor(value):
                    out[f"optimizer {i} state {j} {key}"] = ("optimizer", _local(value))
    return out


def _live_on(tensor: torch.Tensor, device_type: str) -> bool:
    return tensor.device.type == device_type and tensor.numel() > 0 and tensor.untyped_storage().nbytes() > 0


def round_trip(strategy) -> dict:
    """offload(), look, reload(), look. Returns, gathered over ranks: per rank the tensors checked per group
    and the keys that stayed in place at offload / came back wrong at reload."""
    device_type = strategy.device.type
    before = {}
    for key, (group, tensor) in engine_tensors(strategy).items():
        if _live_on(tensor, device_type):
            before[key] = (group, tensor.data_ptr(), tensor.detach().clone())
    strategy.offload()
    now = engine_tensors(strategy)
    stayed = [
        key
        for key, (_, pointer, _) in before.items()
        if key in now and _live_on(now[key][1], device_type) and now[key][1].data_ptr() == pointer
    ]
    strategy.reload()
    now = engine_tensors(strategy)
    wrong = [
        key
        for key, (_, _, value) in before.items()
        if key not in now or not _live_on(now[key][1], device_type) or not torch.equal(now[key][1], value)
    ]
    checked = {}
    for group, _, _ in before.values():
        checked[group] = checked.get(group, 0) + 1
    mine = {"checked": checked, "stayed": stayed, "wrong": wrong}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def assert_every_tensor_moved(round_trips: list, gradients: bool = False, optimizer: bool = True) -> None:
    """Each round trip (one before every training step) moved every tracked tensor out and back on every
    rank; AdamW state exists from the second round trip on (after a step; `optimizer=False`: forward-only
    engines have none); `gradients`: the engine keeps gradient buffers between steps (megatron's
    main_grad), which must be moved too."""
    assert round_trips, "the scenario ran no offload/reload round trip"
    for step, ranks in enumerate(round_trips):
        for rank, seen in enumerate(ranks):
            where = f"round trip before step {step}, rank {rank} (checked {seen['checked']})"
            assert seen["checked"].get("parameters", 0) > 0, where
            assert not optimizer or step == 0 or seen["checked"].get("optimizer", 0) > 0, where
            assert not gradients or seen["checked"].get("gradients", 0) > 0, where
            assert not seen["stayed"], f"{where}: still in compute memory after offload(): {seen['stayed'][:5]}"
            assert not seen["wrong"], f"{where}: not back, or changed, after reload(): {seen['wrong'][:5]}"
