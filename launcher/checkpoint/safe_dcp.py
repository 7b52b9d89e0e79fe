"""Loading a DCP checkpoint without unpickling arbitrary objects.

``torch.distributed.checkpoint``'s file-system reader reads tensors with ``torch.load(weights_only=True)``, but it
unpickles the ``.metadata`` file with plain ``pickle.load`` and non-tensor entries (the optimizer's param groups)
with ``torch.load(weights_only=False)``: a crafted file in a run folder could run code on resume. DCP's own
extension points close both: :class:`SafeFileSystemReader` first reads ``.metadata`` with an unpickler that only
accepts DCP's metadata classes (the "Restricting Globals" recipe of Python's pickle documentation), and
:class:`SafeLoadPlanner` first loads every non-tensor entry with ``weights_only=True``. Only bytes that passed are
handed on to DCP's own code, which then reads the same bytes into the same plain objects.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader

METADATA_FILE = ".metadata"

#: the globals a DCP ``.metadata`` file holds (torch dtypes are accepted separately)
_METADATA_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", name)
    for name in (
        "Metadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "MetadataIndex",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    )
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "PureWindowsPath"),
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _METADATA_GLOBALS or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a checkpoint's {METADATA_FILE}")


def read_metadata(path: str | Path, rank: int | None = None):
    """The DCP metadata of checkpoint folder ``path`` (or DCP's per-rank fallback file ``__<rank>.metadata``, which
    DCP reads when the global one fails), read with the restricted unpickler."""
    name = METADATA_FILE if rank is None else f"__{rank}{METADATA_FILE}"
    with open(Path(path) / name, "rb") as fh:
        return _MetadataUnpickler(fh).load()


class SafeFileSystemReader(FileSystemReader):
    def read_metadata(self, *args, **kwargs):
        read_metadata(self.path, kwargs.get("rank"))
        return super().read_metadata(*args, **kwargs)


class SafeLoadPlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        torch.load(value, weights_only=True)  # raises pickle.UnpicklingError on anything but plain data
        value.seek(0)
        super().load_bytes(read_item, value)
