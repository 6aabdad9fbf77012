"""Offload / reload of an engine's tensors between phases (colocated roles), the same code on GPU and CPU.

`HostParking.offload` copies every storage behind the given tensors (parameters, gradients, optimizer
state) into host memory and then frees it on the compute device (the storage is resized to 0 bytes);
`reload` re-allocates each storage on the compute device and copies its bytes back. Working on storages
rather than tensors keeps every view valid: Megatron's parameters and `main_grad`s are views of its
contiguous buffers (and the distributed optimizer's fp32 shards views of those), FSDP2's sharded
parameters views of a padded flat shard, DeepSpeed's partitions views of flat groups. A per-tensor
`t.data = t.to(device)` cuts those links, and the optimizer then steps a copy the model no longer reads.

On a CPU-only machine the compute device is the host: the copy and the free still happen (the storage
is really released and re-allocated), so the tests observe the same path a GPU runs.
"""

import torch

OFFLOAD_DEVICE = torch.device("cpu")


def _bytes_of(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over the whole storage (no copy)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


class HostParking:
    """The storages of one engine parked in host memory between offload() and reload()."""

    def __init__(self, compute_device: torch.device, owner: str):
        self.compute_device = torch.device(compute_device)
        self.owner = owner
        self._parked: list[tuple[torch.UntypedStorage, torch.Tensor]] = []  # (freed storage, host copy)

    @property
    def offloaded(self) -> bool:
        return bool(self._parked)

    @torch.no_grad()
    def offload(self, groups: dict) -> dict[str, int]:
        """`groups`: {group name: iterable of tensors (None and non-tensors skipped)}. Parks every live
        storage on the compute device once (shared storages are counted in the first group naming them);
        returns the bytes parked per group. Offloading twice without a reload is a no-op."""
        if self._parked:
            return {}
        storages, moved = self._storages(groups)
        pin = self.compute_device.type == "cuda"
        for storage, _ in storages.values():  # one storage at a time: the peak is one extra storage
            host = torch.empty(storage.nbytes(), dtype=torch.uint8, device=OFFLOAD_DEVICE, pin_memory=pin)
            host.copy_(_bytes_of(storage))  # blocking: done before the source is freed
            storage.resize_(0)
            self._parked.append((storage, host))
        if pin:
            torch.cuda.empty_cache()
        return moved

    @torch.no_grad()
    def reload(self) -> int:
        """Re-allocates the parked storages on the compute device with their bytes; returns the bytes."""
        total = 0
        for storage, host in self._parked:
            storage.resize_(host.numel())
            _bytes_of(storage).copy_(host)
            total += host.numel()
        if self.compute_device.type == "cuda":
            torch.cuda.synchronize()
        self._parked = []
        return total

    def _storages(self, groups: dict) -> tuple[dict, dict[str, int]]:
        """{storage key: (storage, group)} of the live storages on the compute device, bytes per group."""
        found: dict[int, tuple[torch.UntypedStorage, str]] = {}
        adopted: set[int] = set()
        moved = {name: 0 for name in groups}
        for name, tensors in groups.items():
            for tensor in tensors:
                if not torch.is_tensor(tensor) or tensor.device.type != self.compute_device.type:
                    continue
                if hasattr(tensor, "to_local"):  # a DTensor: its local shard holds the memory
                    tensor = tensor.to_local()
                storage = tensor.untyped_storage()
                if storage.nbytes() == 0 or storage.data_ptr() in found:
                    continue
                if storage.data_ptr() in adopted:
                    raise RuntimeError(
                        f"{self.owner}: two tensors ({name}) share a storage that cannot be resized "
                        "(memory-mapped?): copy it into engine-owned memory at load"
                    )
                if not storage.resizable():
                    adopted.add(storage.data_ptr())
                    storage = self._adopt(tensor, name)
                found[storage.data_ptr()] = (storage, name)
                moved[name] += storage.nbytes()
        return found, moved

    def _adopt(self, tensor: torch.Tensor, group: str) -> torch.UntypedStorage:
        """A storage that cannot be resized (weights a checkpoint loader mapped in place) gets a resizable
        copy once; safe only for a tensor that is the whole storage, so no other view can lose it."""
        if tensor.storage_offset() != 0 or tensor.nbytes != tensor.untyped_storage().nbytes():
            raise RuntimeError(
                f"{self.owner}: cannot offload a {group} tensor {tuple(tensor.shape)} that is a view into a "
                "storage that cannot be resized (memory-mapped?); copy it into engine-owned memory at load"
            )
        tensor.data = tensor.data.clone()
        return tensor.untyped_storage()


class ParkedOffload:
    """offload()/reload() for a strategy whose `_offload_groups()` names its tensors by group (mixin; the
    strategy's `_parking` is a HostParking for its compute device)."""

    def offload(self) -> None:
        moved = self._parking.offload(self._offload_groups())
        self.logger.debug("%s offload: %s bytes", type(self).__name__, moved)

    def reload(self) -> None:
        self._parking.reload()

    def _offload_groups(self) -> dict:
        raise NotImplementedError
