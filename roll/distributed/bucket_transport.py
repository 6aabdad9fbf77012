"""How one weight bucket travels from a trainer worker to inference workers (the transport under the worker side,
roll.workers.weight_sync_worker, which roll.pipeline.core.weight_sync drives).

A bucket is packed into one flat byte buffer plus a list of (name, dtype, shape, offset) entries, so
every transport moves a single tensor per bucket and the receiver rebuilds the named tensors as views:

- object store: the buffer (as a numpy array) goes through `ray.put` in the trainer's worker; the
  inference workers read it from the node's shared object store (the driver only sees the reference).
- collective: a broadcast in a dedicated process group of trainer rank 0 + every inference worker,
  built from its own TCPStore (`BroadcastGroup`): the trainer's and vLLM's default groups are untouched.
  gloo on CPU (verified here), NCCL on GPU (not verified by this project).
- ipc (colocated workers): on CPU the buffer is a file in /dev/shm that the receiver maps (no copy
  through Ray); on GPU a CUDA IPC handle of the device buffer (not verified by this project).
"""

import datetime
import os
import shutil
import uuid

import torch

ALIGN = 64  # every tensor starts on a 64-byte boundary, so byte views can be re-typed to any dtype
SHM_DIR = "/dev/shm"


# --- packing ---------------------------------------------------------------------------------------
def bucket_layout(bucket) -> tuple[list, int]:
    """[(name, dtype name, shape, byte offset)] and the buffer size for a list of (name, tensor)."""
    entries, offset = [], 0
    for name, tensor in bucket:
        entries.append((name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), offset))
        offset += -(-tensor.numel() * tensor.element_size() // ALIGN) * ALIGN
    return entries, offset


def pack_into(bucket, buffer: torch.Tensor, entries) -> None:
    for (_, tensor), (_, _, _, offset) in zip(bucket, entries):
        flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        buffer[offset : offset + flat.numel()].copy_(flat)


def unpack(buffer: torch.Tensor, entries) -> list[tuple[str, torch.Tensor]]:
    """Named tensors as views of `buffer` (a flat uint8 tensor); nothing is copied."""
    out = []
    for name, dtype, shape, offset in entries:
        dtype = getattr(torch, dtype)
        nbytes = torch.Size(shape).numel() * dtype.itemsize
        out.append((name, buffer[offset : offset + nbytes].view(dtype).view(shape)))
    return out


def pack(bucket, device: str = "cpu") -> tuple[torch.Tensor, list]:
    entries, size = bucket_layout(bucket)
    buffer = torch.empty(size, dtype=torch.uint8, device=device)
    pack_into(bucket, buffer, entries)
    return buffer, entries


# --- ipc: /dev/shm on CPU, CUDA IPC on GPU ----------------------------------------------------------------
def write_shm(bucket) -> tuple[str, int, list]:
    """The bucket packed into a new /dev/shm file; (path, size, entries). The caller unlinks the file."""
    entries, size = bucket_layout(bucket)
    free = shutil.disk_usage(SHM_DIR).free
    if size > free:
        raise RuntimeError(
            f"weight sync (ipc): a bucket of {size / 2**20:.1f} MB does not fit in {SHM_DIR} "
            f"({free / 2**20:.1f} MB free); lower model_update_buffer_size_mb or enlarge {SHM_DIR}"
        )
    path = os.path.join(SHM_DIR, f"roll-weights-{os.getpid()}-{uuid.uuid4().hex}")
    mapped = torch.from_file(path, shared=True, size=max(size, 1), dtype=torch.uint8)
    pack_into(bucket, mapped, entries)
    return path, size, entries


def map_shm(path: str, size: int) -> torch.Tensor:
    """The writer's file mapped into this process (shared pages, no copy); valid after the file is unlinked."""
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"weight sync (ipc): {path} is missing: the trainer worker is on another node or "
            f"removed it; use weight_sync_method collective or object_store"
        )
    return torch.from_file(path, shared=True, size=max(size, 1), dtype=torch.uint8)[:size]


def cuda_ipc_handle(buffer: torch.Tensor):
    """GPU only, not verified by this project: a picklable handle another process on the same GPU can open."""
    from torch.multiprocessing.reductions import reduce_tensor

    return reduce_tensor(buffer)


def open_cuda_ipc(handle) -> torch.Tensor:
    rebuild, args = handle
    args = list(args)
    args[6] = torch.cuda.current_device()  # the device index as this process numbers it (same physical GPU)
    return rebuild(*args)


# --- collective ----------------------------------------------------------------------------------------
class BroadcastGroup:
    """A process group of its own (rank 0 = the trainer's sender, ranks 1.. = inference workers), built from
    a TCPStore so it can live next to any default group a process already has. Every operation is bounded
    by `timeout_s`: a peer that never arrives fails the call instead of hanging it."""

    def __init__(
        self,
        host: str,
        port: int,
        rank: int,
        world_size: int,
        timeout_s: float,
        backend: str,
        local_ip: str | None = None,
    ):
        """host:port is the sender's node address (its TCPStore); `local_ip` is this process's node address,
        which gloo binds to and tells its peers (by default gloo takes the host name's address, which
        /etc/hosts often maps to 127.0.0.1: unreachable from another node)."""
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False)
        self.store = dist.PrefixStore("roll_weight_sync", store)
        self.rank, self.world_size, self.backend, self.timeout = rank, world_size, backend, timeout
        self.host, self.port, self.local_ip = host, port, local_ip
        if backend == "gloo" and local_ip:
            options = dist.ProcessGroupGloo._Options()
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=local_ip)]
            options._timeout = timeout
            self.group = dist.ProcessGroupGloo(self.store, rank, world_size, options)
        elif backend == "gloo":
            self.group = dist.ProcessGroupGloo(self.store, rank, world_size, timeout)
        elif backend == "nccl":  # GPU only, not verified by this project
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.group = dist.ProcessGroupNCCL(self.store, rank, world_size, options)
        else:
            raise ValueError(f"weight sync: unknown collective backend {backend!r} (gloo or nccl)")

    def broadcast(self, buffer: torch.Tensor) -> None:
        """In place: rank 0's buffer into everyone's (same size and dtype everywhere)."""
        import torch.distributed as dist

        options = dist.BroadcastOptions()
        options.rootRank = 0
        options.timeout = self.timeout
        self.group.broadcast([buffer], options).wait()

    def close(self) -> None:
        self.group.shutdown()
