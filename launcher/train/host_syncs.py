"""Counting host syncs: the calls that read a tensor's value back to Python (docs/performance.md#one-host-sync-per-update).

On an accelerator each such read (``.item()``, ``float(t)``, ``.tolist()``, ``.cpu()``, ``if t:`` ...) makes the host
wait for every kernel queued so far, so the next transformer call cannot be queued behind the running one. The
counter wraps those methods of ``torch.Tensor`` while it is active and counts the calls made outside torch itself
(torch's own reads, e.g. the optimizers' step counters, live in host memory and wait for nothing). It counts the
same calls on the CPU, where nothing waits, so a test on the CPU bounds what a GPU run would sync.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import torch

#: Tensor methods that return host values (each one a device sync for a tensor on an accelerator)
READ_BACKS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


class HostSyncCounter:
    """Context manager: ``with HostSyncCounter() as syncs: ...``; then ``syncs.total`` and ``syncs.sites``
    (``file:line name`` -> count, to find where they come from)."""

    def __init__(self):
        self.sites: Counter[str] = Counter()
        self._saved: dict[str, object] = {}

    @property
    def total(self) -> int:
        return sum(self.sites.values())

    def __enter__(self) -> HostSyncCounter:
        for name in READ_BACKS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original
            setattr(torch.Tensor, name, self._wrap(name, original))
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()

    def _wrap(self, name: str, original):
        sites = self.sites

        def counted(tensor, *args, **kwargs):
            caller = sys._getframe(1)
            if not caller.f_code.co_filename.startswith(_TORCH_DIR):
                sites[f"{os.path.relpath(caller.f_code.co_filename)}:{caller.f_lineno} {name}"] += 1
            return original(tensor, *args, **kwargs)

        return counted
