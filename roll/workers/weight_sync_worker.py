"""Worker side of the bucketed weight sync (driven by roll.pipeline.core.weight_sync.WeightSync).

Trainer (every rank, because the strategies gather shards collectively): `open_weight_stream` starts
`buckets(strategy.named_hf_parameters(), limit)`, floating tensors cast to the engine's dtype and (for the
sync check) summed into a checksum of what is sent, on their device; each `next_weight_bucket` advances it
by one bucket on all ranks, and the ranks that serve inference workers publish it (object store, /dev/shm,
CUDA IPC, or keep it for `broadcast_weight_bucket`). Only one bucket per rank is alive at a time.

Inference: `begin_weight_update` starts the strategy's own `load_weights(iterator)` in a thread, fed one
bucket per `receive_weight_bucket` call (an engine such as in-process vLLM reloads from one iterator);
`finish_weight_update` ends the iterator and returns what was loaded, raising the loader's error if any.
"""

import queue
import socket
import threading
import time
import warnings

import torch

from roll.distributed import bucket_transport as transport
from roll.distributed.decorator import Dispatch, register
from roll.distributed.ray_utils import node_ip
from roll.strategies.base import buckets
from roll.strategies.train_common import Checksum

_END = object()


class WeightReceiver:
    """Buckets arriving in separate calls → one `load(iterator)` call running in a thread."""

    def __init__(self, load, name: str, timeout_s: float):
        self.name, self.timeout_s = name, timeout_s
        self.tensors = self.bytes = 0
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._taken = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(load,), name=f"{name}-weight-load", daemon=True)
        self._thread.start()

    def _items(self):
        while True:
            bucket = self._queue.get()
            if bucket is _END:
                return
            for name, tensor in bucket:
                self.tensors += 1
                self.bytes += tensor.numel() * tensor.element_size()
                yield name, tensor
            self._taken.set()  # the loader asked for the item after this bucket's last one

    def _run(self, load) -> None:
        try:
            with torch.no_grad():
                load(self._items())
        except BaseException as error:  # reported by the next put() or by finish()
            self._error = error
        finally:
            self._taken.set()

    def put(self, bucket: list) -> None:
        """Returns once the loader has consumed the bucket (bounded memory; errors surface per bucket)."""
        self._raise_if_failed()
        if not self._thread.is_alive():
            raise RuntimeError(f"{self.name}: the weight loader stopped before all buckets arrived")
        self._taken.clear()
        self._queue.put(bucket, timeout=self.timeout_s)
        if not self._taken.wait(self.timeout_s):
            raise TimeoutError(f"{self.name}: loading one weight bucket took longer than {self.timeout_s} s")
        self._raise_if_failed()

    def finish(self) -> dict:
        if self._thread.is_alive():
            self._queue.put(_END, timeout=self.timeout_s)
            self._thread.join(self.timeout_s)
            if self._thread.is_alive():
                raise TimeoutError(f"{self.name}: the weight loader did not finish within {self.timeout_s} s")
        self._raise_if_failed()
        return {"tensors": self.tensors, "bytes": self.bytes}

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"{self.name}: loading the trainer's weights failed: {self._error}") from self._error


def as_sent(named_tensors, dtype: torch.dtype | None, sent: Checksum | None):
    """The stream's tensors in the engine's dtype (floating ones), added to `sent` as they go."""
    for name, tensor in named_tensors:
        if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        if sent is not None:
            sent.add(tensor)
        yield name, tensor


class WeightTransferMixin:
    """@register-ed methods of ActorWorker for WeightSync (see the module docstring)."""

    # --- trainer side ---------------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def open_weight_stream(
        self,
        method: str,
        limit_bytes: float,
        serving_ranks: list,
        adapter: bool = False,
        dtype: str | None = None,
        checksum: bool = False,
    ) -> None:
        """`adapter`: stream the LoRA adapter matrices only (named_adapter_parameters), else the full HF
        weights (named_hf_parameters: merged with LoRA). `dtype`: floating tensors go in the dtype the
        engine serves (it would round them on loading anyway; half the bytes for bf16 from fp32 masters).
        `checksum`: serving ranks sum what they send (sent_weights_checksum), on the tensors' device."""
        named = getattr(self.strategy, "named_adapter_parameters" if adapter else "named_hf_parameters", None)
        if named is None:
            raise TypeError(
                f"{self.worker_name}: strategy {type(self.strategy).__name__} cannot export weights "
                f"(actor_train needs a training strategy)"
            )
        self._close_stream()
        serves = self.rank in serving_ranks
        self._sent = Checksum() if checksum and serves else None
        tensors = as_sent(named(), getattr(torch, dtype) if dtype else None, self._sent)
        self._stream = buckets(tensors, limit_bytes)
        self._stream_method, self._stream_serves, self._pending = method, serves, None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sent_weights_checksum(self) -> float | None:
        """Checksum of what the last stream sent, as sent (serving ranks with checksum=True; else None)."""
        sent = getattr(self, "_sent", None)
        return sent.value() if sent is not None else None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def next_weight_bucket(self) -> dict | None:
        """The next bucket on every rank (collective gathers); None when the model is done. A serving rank
        returns what its inference workers need to fetch the bucket; every rank returns the sizes."""
        self._release_pending()
        bucket = next(self._stream, None)
        if bucket is None:
            return None
        sizes = [t.numel() * t.element_size() for _, t in bucket]
        info = {"tensors": len(bucket), "bytes": sum(sizes), "largest": max(sizes)}
        if self._stream_serves:
            info.update(self._publish(bucket))
        return info

    def _publish(self, bucket) -> dict:
        method, on_gpu = self._stream_method, torch.cuda.is_available()
        if method == "object_store":
            buffer, entries = transport.pack(bucket, "cpu")
            import ray

            data = [ray.put(buffer.numpy())] if ray.is_initialized() else buffer  # in-process use: hand it over
            return {"kind": "object", "data": data, "entries": entries}
        if method == "collective":
            self._pending, entries = transport.pack(bucket, "cuda" if on_gpu else "cpu")
            return {"kind": "broadcast", "size": self._pending.numel(), "entries": entries}
        if method == "ipc" and on_gpu:  # not verified by this project
            self._pending, entries = transport.pack(bucket, "cuda")
            return {"kind": "cuda_ipc", "handle": transport.cuda_ipc_handle(self._pending), "entries": entries}
        if method == "ipc":
            path, size, entries = transport.write_shm(bucket)
            self._pending = path
            return {"kind": "shm", "path": path, "size": size, "entries": entries}
        raise ValueError(f"{self.worker_name}: unknown weight sync method {method!r}")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def broadcast_weight_bucket(self) -> None:
        if self._stream_serves and self._stream_method == "collective":
            self._weight_group.broadcast(self._pending)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def close_weight_stream(self) -> None:
        self._close_stream()

    def _close_stream(self) -> None:
        self._release_pending()
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.close()
        self._stream = None

    def _release_pending(self) -> None:
        pending, self._pending = getattr(self, "_pending", None), None
        if isinstance(pending, str):  # the /dev/shm file of the previous bucket (receivers' maps stay valid)
            import os

            try:
                os.unlink(pending)
            except FileNotFoundError:
                pass

    # --- the collective group (trainer rank 0 = group rank 0, inference rank r = group rank 1 + r) ---------
    @register(dispatch_mode=Dispatch.RANK0)
    def weight_group_address(self) -> tuple[str, int]:
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return self.master_addr or node_ip(), port  # the node's address: inference workers may be on other nodes

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def join_weight_group(self, host: str, port: int, world_size: int, timeout_s: float, sender: bool) -> dict | None:
        """Joins the group (trainer rank 0 and every inference worker); returns this member's addresses."""
        if sender and self.rank != 0:
            return None
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        self._weight_group = transport.BroadcastGroup(
            host, port, 0 if sender else 1 + self.rank, world_size, timeout_s, backend, local_ip=node_ip()
        )
        return {"rank": self._weight_group.rank, "host": host, "port": port, "local_ip": node_ip()}

    # --- inference side -------------------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def begin_weight_update(self, serving_rank: dict, timeout_s: float, adapter_config: dict | None = None) -> None:
        """serving_rank: inference rank → the trainer rank whose payload it reads. `adapter_config` (a peft
        adapter_config): the stream is a LoRA adapter for the strategy's load_adapter, not full weights."""
        self.abort_weight_update()
        self._serving_rank, self._receive_timeout = serving_rank[self.rank], timeout_s
        if adapter_config is not None:
            strategy = self.strategy

            def load(named_tensors):
                return strategy.load_adapter(named_tensors, adapter_config)
        else:
            load = self.strategy.load_weights
        self._receiver = WeightReceiver(load, f"{self.worker_name}[{self.rank}]", timeout_s)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def receive_weight_bucket(self, payloads: list) -> None:
        payload = payloads[self._serving_rank]
        kind = payload["kind"]
        if kind == "object":
            buffer = payload["data"]
            if isinstance(buffer, list):
                import ray

                array = ray.get(buffer[0], timeout=self._receive_timeout)
                with warnings.catch_warnings():  # read-only shared-memory array: loaders only read it
                    warnings.simplefilter("ignore", UserWarning)
                    buffer = torch.from_numpy(array)
        elif kind == "broadcast":
            on_gpu = torch.cuda.is_available()
            buffer = torch.empty(payload["size"], dtype=torch.uint8, device="cuda" if on_gpu else "cpu")
            self._weight_group.broadcast(buffer)
        elif kind == "shm":
            buffer = transport.map_shm(payload["path"], payload["size"])
        elif kind == "cuda_ipc":
            buffer = transport.open_cuda_ipc(payload["handle"])
        else:
            raise ValueError(f"{self.worker_name}: unknown weight payload kind {kind!r}")
        self._receiver.put(transport.unpack(buffer, payload["entries"]))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def finish_weight_update(self) -> dict:
        receiver, self._receiver = self._receiver, None
        started = time.perf_counter()
        stats = receiver.finish()
        stats["finish_seconds"] = time.perf_counter() - started
        return stats

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def abort_weight_update(self) -> None:
        """Stop a half-done update (the sender failed); the loader's missing-weights error is expected."""
        receiver, self._receiver = getattr(self, "_receiver", None), None
        if receiver is not None:
            try:
                receiver.finish()
            except (RuntimeError, TimeoutError) as error:
                self.logger.warning("abandoned weight update: %s", error)
