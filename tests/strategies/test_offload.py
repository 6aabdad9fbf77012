"""roll/strategies/offload.py's HostParking on its own (no engine, no processes): storages leave compute
memory and come back with their bytes, and every view into them stays a view (what megatron's buffers,
FSDP2's flat shards and DeepSpeed's flat groups rely on). The engines' round trips are watched in
test_train_strategies.py, test_megatron_train.py and test_lora_strategies.py (offload_probe.py)."""

import numpy as np
import pytest
import torch

from roll.strategies.offload import OFFLOAD_DEVICE, HostParking


def test_storages_are_freed_and_restored_with_views_intact():
    flat = torch.arange(12, dtype=torch.float32)
    weight, bias = flat[:8].view(2, 4), flat[8:]  # views into one buffer, like megatron's param buffer
    moment = torch.full((3,), 0.5)
    optimizer_state = {weight: {"exp_avg": moment}}
    parking = HostParking(torch.device("cpu"), "test")

    moved = parking.offload({"parameters": [weight, bias], "optimizer": [optimizer_state[weight]["exp_avg"]]})

    assert moved == {"parameters": 48, "optimizer": 12}  # the shared buffer once, not once per view
    assert parking.offloaded
    assert flat.untyped_storage().nbytes() == 0 and moment.untyped_storage().nbytes() == 0
    assert all(host.device == OFFLOAD_DEVICE for _, host in parking._parked)
    assert parking.offload({"parameters": [weight]}) == {}  # a second offload before reload does nothing

    assert parking.reload() == 60
    assert not parking.offloaded
    assert torch.equal(flat, torch.arange(12, dtype=torch.float32)) and torch.equal(moment, torch.full((3,), 0.5))
    weight.add_(100)  # still a view: the buffer sees the write
    assert flat[0].item() == 100 and bias.data_ptr() == flat.data_ptr() + 8 * 4


def test_unresizable_whole_tensor_is_adopted_and_views_into_one_are_refused():
    param = torch.nn.Parameter(torch.from_numpy(np.arange(4, dtype=np.float32)))  # numpy memory: not resizable
    assert not param.untyped_storage().resizable()
    parking = HostParking(torch.device("cpu"), "test")
    assert parking.offload({"parameters": [param]}) == {"parameters": 16}
    assert param.untyped_storage().nbytes() == 0
    parking.reload()
    assert torch.equal(param.detach(), torch.arange(4, dtype=torch.float32))

    view = torch.from_numpy(np.arange(4, dtype=np.float32))[1:]
    with pytest.raises(RuntimeError, match="view into a storage that cannot be resized"):
        HostParking(torch.device("cpu"), "test").offload({"optimizer": [view]})


def test_tensors_off_the_compute_device_are_left_alone():
    """On a GPU, tensors already in host memory (AdamW step counters, cpu_offload shards) are not parked."""
    host_tensor = torch.ones(4)
    parking = HostParking(torch.device("meta"), "test")  # any compute device other than the host
    assert parking.offload({"optimizer": [host_tensor, None, 3]}) == {"optimizer": 0}
    assert host_tensor.untyped_storage().nbytes() == 16 and not parking.offloaded
