"""DataProto: the batch that moves between the driver and every role.

`batch` holds tensors sharing the leading (row) dimension, `non_tensor_batch` holds numpy object
arrays with the same rows (texts, uids, tags), `meta_info` holds per-call settings that are not
per-row. Tensors pickle as raw buffers, so sending one through Ray costs a copy, not a conversion.
"""

import pickle
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class DataProto:
    batch: dict = field(default_factory=dict)
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.non_tensor_batch = {k: _as_object_array(k, v) for k, v in self.non_tensor_batch.items()}
        self._check_rows()

    @classmethod
    def from_dict(cls, tensors=None, non_tensors=None, meta_info=None) -> "DataProto":
        return cls(dict(tensors or {}), dict(non_tensors or {}), dict(meta_info or {}))

    def _check_rows(self) -> None:
        lengths = {k: v.shape[0] for k, v in self.batch.items()}
        lengths.update({k: len(v) for k, v in self.non_tensor_batch.items()})
        if len(set(lengths.values())) > 1:
            raise ValueError(f"DataProto: every entry needs the same number of rows, got {lengths}")

    def __len__(self) -> int:
        for value in self.batch.values():
            return value.shape[0]
        for value in self.non_tensor_batch.values():
            return len(value)
        return 0

    def __getitem__(self, index) -> "DataProto":
        if isinstance(index, int):
            index = [index]
        if isinstance(index, slice):
            rows = index
        else:
            rows = torch.as_tensor(np.asarray(index), dtype=torch.long)
        np_rows = rows if isinstance(rows, slice) else rows.numpy()
        return DataProto(
            {k: v[rows] for k, v in self.batch.items()},
            {k: v[np_rows] for k, v in self.non_tensor_batch.items()},
            dict(self.meta_info),
        )

    def select(self, batch_keys=None, non_tensor_keys=None, meta_info_keys=None) -> "DataProto":
        """A view with only the named keys (None keeps all; missing keys raise)."""
        return DataProto(
            _pick(self.batch, batch_keys, "batch"),
            _pick(self.non_tensor_batch, non_tensor_keys, "non_tensor_batch"),
            _pick(self.meta_info, meta_info_keys, "meta_info"),
        )

    def chunk(self, chunks: int) -> list["DataProto"]:
        if len(self) % chunks:
            raise ValueError(
                f"DataProto.chunk: {len(self)} rows do not split into {chunks} equal parts; "
                f"make the batch size a multiple of {chunks}"
            )
        size = len(self) // chunks
        return [self[slice(i * size, (i + 1) * size)] for i in range(chunks)]

    @staticmethod
    def concat(parts: list["DataProto"]) -> "DataProto":
        """Rows of all parts in order; meta_info is merged with the first part's value winning."""
        if not parts:
            raise ValueError("DataProto.concat: nothing to concatenate")
        keys = set(parts[0].batch)
        for part in parts[1:]:
            if set(part.batch) != keys:
                raise ValueError(f"DataProto.concat: tensor keys differ: {sorted(keys)} vs {sorted(part.batch)}")
        meta = {}
        for part in reversed(parts):
            meta.update(part.meta_info)
        return DataProto(
            {k: torch.cat([p.batch[k] for p in parts]) for k in parts[0].batch},
            {k: np.concatenate([p.non_tensor_batch[k] for p in parts]) for k in parts[0].non_tensor_batch},
            meta,
        )

    def pad_to_multiple(self, multiple: int, loss_free_keys=()) -> tuple["DataProto", int]:
        """Append copies of leading rows until `len` divides `multiple` (workers split rows evenly); returns
        (padded batch, rows added). Callers drop the copies' outputs. For a training batch, name the tensors
        that carry loss in `loss_free_keys`: the copies get zeros there and a `uid` group of their own, so
        they change no token-mean loss and no group statistic."""
        pad = (-len(self)) % multiple
        if pad == 0:
            return self, 0
        filler = self[[i % len(self) for i in range(pad)]]
        for key in loss_free_keys:
            if key in filler.batch:
                filler.batch[key] = torch.zeros_like(filler.batch[key])
        if loss_free_keys and "uid" in filler.non_tensor_batch:
            filler.non_tensor_batch["uid"] = np.array([f"padding-{i}" for i in range(pad)], dtype=object)
        return DataProto.concat([self, filler]), pad

    def nbytes(self) -> int:
        """Bytes this batch takes when pickled (as Ray sends it): the tensors' whole storages (a pickled
        view carries its base tensor's storage: see `compact`) plus the pickled non-tensor rows and meta_info."""
        extra = pickle.dumps((self.non_tensor_batch, self.meta_info), protocol=pickle.HIGHEST_PROTOCOL)
        return sum(v.untyped_storage().nbytes() for v in self.batch.values()) + len(extra)

    def compact(self) -> "DataProto":
        """The same rows with each tensor that views a larger storage copied out: a row slice (`chunk`,
        `[...]`) pickles its base tensor's whole storage, i.e. every row of the batch it came from."""
        tensors = {
            k: v.clone() if v.untyped_storage().nbytes() > v.numel() * v.element_size() else v
            for k, v in self.batch.items()
        }
        return DataProto(tensors, dict(self.non_tensor_batch), dict(self.meta_info))

    def to(self, device) -> "DataProto":
        self.batch = {k: v.to(device) for k, v in self.batch.items()}
        return self


def _as_object_array(key, value) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype == object:
        return value
    array = np.empty(len(value), dtype=object)
    array[:] = list(value)
    return array


def _pick(store: dict, keys, where: str) -> dict:
    if keys is None:
        return dict(store)
    missing = [k for k in keys if k not in store]
    if missing:
        raise KeyError(f"DataProto {where} has no {missing}; available: {sorted(store)}")
    return {k: store[k] for k in keys}
