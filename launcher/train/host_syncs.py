"""Counting host syncs: the calls that read a tensor's value back to Python (docs/performance.md#one-host-sync-per-update).

On an accelerator each such read (``.item()``, ``float(t)``, ``.tolist()``, ``.cpu()``, ``if t:`` ...) makes the host
wait for every kernel queued so far, so the next transformer call cannot be queued behind the running one. The
counter wraps those methods of ``torch.Tensor`` while it is active and counts the calls made outside torch itself
(torch's own reads, e.g. the optimizers' step counters, live in host memory and wait for nothing). It counts the
same calls on the CPU, where nothing waits, so a test on the CPU bounds what a GPU run would sync.

It also counts host<->device copies, each a sync on CUDA unless ``non_blocking`` from pinned memory (issue 27): a
``Tensor.to`` naming a device (or another tensor) whose source or target is the host, a ``copy_`` between devices,
and ``torch.tensor`` / ``torch.as_tensor`` of Python data (or of a tensor on another device) with a device, made in this
project's code (not the libraries'). A ``non_blocking`` copy from pinned memory is not counted (on a machine without
an accelerator, where nothing can be pinned, ``non_blocking`` is taken to mark the code's pinned path; on CUDA the
counter checks ``is_pinned``). On the CPU every device is the host, so a
``.to(device)`` of a tensor that would already sit on an accelerator is counted too: the CPU count stays an upper
bound of the GPU one, and code on the hot path keeps its tables on the compute device instead of moving them per call
(``docs/performance.md#one-host-sync-per-update``). What the CPU cannot see: a tensor created on the host and moved
implicitly (indexing a device tensor with it), or a ``torch.as_tensor`` of a host tensor that is already "on the
device" here; the GPU check counts the same calls on CUDA.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import torch

#: Tensor methods that return host values (each one a device sync for a tensor on an accelerator)
READ_BACKS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")
#: ``(owner, name)`` of the calls that may copy between host and device, counted only when they do (:func:`_copies`)
COPIES = ((torch.Tensor, "to"), (torch.Tensor, "copy_"), (torch, "tensor"), (torch, "as_tensor"))
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
#: copies are counted in this project's code only: the libraries' (diffusers' rotary tables, ...) move tensors built
#: on the device from our device inputs, no-ops on an accelerator that the CPU count could not tell apart
_LIBRARIES = (_TORCH_DIR, os.path.dirname(os.path.dirname(torch.__file__)) + os.sep)


def _device_of(value) -> torch.device | None:
    if isinstance(value, torch.Tensor):
        return value.device
    if isinstance(value, (torch.device, str)):
        return torch.device(value)
    return None


def _copies(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether this call copies between host and device (on the CPU: would on an accelerator, see above)."""
    if name == "copy_":
        dst, src = args[0], args[1]
        return isinstance(src, torch.Tensor) and dst.device != src.device
    if name in ("tensor", "as_tensor"):
        target = _device_of(kwargs.get("device"))
        data = args[0] if args else kwargs.get("data")
        # Python data always passes through the host; a tensor is copied only to another device
        return target is not None and (not isinstance(data, torch.Tensor) or data.device != target)
    source = args[0]
    if kwargs.get("non_blocking") and (source.is_pinned() or not torch.cuda.is_available()):
        # queued from pinned memory: the host does not wait (models.backbone.host_randn). Without an accelerator
        # nothing can be pinned, and ``non_blocking`` marks the code's pinned path, checked on CUDA by is_pinned
        return False
    given = [d for d in (_device_of(a) for a in args[1:]) if d is not None]
    target = _device_of(kwargs.get("device", kwargs.get("other"))) or (given[0] if given else None)
    return target is not None and (source.device.type == "cpu" or target.type == "cpu")


class HostSyncCounter:
    """Context manager: ``with HostSyncCounter() as syncs: ...``; then ``syncs.total`` and ``syncs.sites``
    (``file:line name`` -> count, to find where they come from)."""

    def __init__(self):
        self.sites: Counter[str] = Counter()
        self._saved: dict[tuple[object, str], object] = {}

    @property
    def total(self) -> int:
        return sum(self.sites.values())

    def __enter__(self) -> HostSyncCounter:
        for owner, name in [(torch.Tensor, n) for n in READ_BACKS] + list(COPIES):
            original = getattr(owner, name)
            self._saved[(owner, name)] = original
            setattr(owner, name, self._wrap(name, original, (owner, name) in COPIES))
        return self

    def __exit__(self, *exc) -> None:
        for (owner, name), original in self._saved.items():
            setattr(owner, name, original)
        self._saved.clear()

    @property
    def copies(self) -> int:
        """The host<->device copies among :attr:`total`."""
        return sum(n for site, n in self.sites.items() if site.rsplit(" ", 1)[1] in {c for _, c in COPIES})

    def _wrap(self, name: str, original, copy: bool):
        sites = self.sites

        def counted(*args, **kwargs):
            caller = sys._getframe(1)
            if not caller.f_code.co_filename.startswith(_TORCH_DIR if not copy else _LIBRARIES) and (
                not copy or _copies(name, args, kwargs)
            ):
                sites[f"{os.path.relpath(caller.f_code.co_filename)}:{caller.f_lineno} {name}"] += 1
            return original(*args, **kwargs)

        return counted
