"""How the memory scripts measure (scripts/bench_memory.py, scripts/calibrate_memory.py).

**CPU.** The figure is the process's *anonymous* resident memory (``RssAnon`` in ``/proc/self/status``): what it holds
itself (tensors, allocator arenas, Python objects). File pages of memory-mapped weights (safetensors are read
through ``mmap``) are ``RssFile``, which the kernel can drop, and do not count. A phase's figure is the peak of
``RssAnon`` during the phase minus its value just before the phase (after imports). The peak is sampled every
``interval`` seconds by a thread (the tensors that matter live for milliseconds at least; torch releases the GIL in
its kernels). glibc's malloc would otherwise keep freed blocks and move its mmap threshold up; the scripts run with
``MALLOC_MMAP_THRESHOLD_=65536`` (set in the environment before Python starts, see :func:`malloc_env`) so that every
tensor above 64 KiB is its own mapping, returned to the system when freed.

**CUDA.** ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus ``memory_allocated`` before.
"""

from __future__ import annotations

import os
import threading
import time

import torch

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}


def malloc_env() -> dict[str, str]:
    """Environment for processes whose memory is measured (see the module docstring)."""
    return {**os.environ, **MALLOC_ENV}


def rss_anon() -> int:
    """Anonymous resident bytes of this process."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")


class PeakProbe:
    """``with PeakProbe(device) as p: ...`` then ``p.increase``: peak bytes during the block over the bytes at entry."""

    def __init__(self, device: torch.device | str = "cpu", interval: float = 0.001):
        self.device, self.interval = torch.device(device), interval
        self.base = self.peak = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_anon())
            time.sleep(self.interval)

    def __enter__(self) -> PeakProbe:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        self.base = self.peak = rss_anon()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
            return
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_anon())

    @property
    def increase(self) -> int:
        return self.peak - self.base

    def increase_now(self) -> int:
        """The current (not peak) bytes over the entry's, inside the block."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            return torch.cuda.memory_allocated() - self.base
        return rss_anon() - self.base
