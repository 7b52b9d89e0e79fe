"""Seconds per phase of a step (``time/<phase>_s`` in docs/metrics.md), accumulated across the step's calls of each
phase.

On the CPU a phase's work is done when its ``with`` block ends, so ``time.perf_counter`` is the truth. On CUDA the
host only queues kernels: a phase's block ends while its kernels still run, and the wall clock would charge them to
whichever later phase waits for them (the next host sync). So on CUDA each phase records a pair of CUDA events on the
current stream (no sync: recording is queued like a kernel), and :meth:`PhaseTimer.read` reads their elapsed times at
a point the step already synchronises (the trainer reads after the step's last read-back), adding no host sync to the
update (docs/performance.md#one-host-sync-per-update; ``launcher/train/host_syncs.py`` does not count event calls,
and recording one waits for nothing).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def cuda_event() -> Any:
    import torch

    return torch.cuda.Event(enable_timing=True)


class PhaseTimer:
    """``with timer("rollout"): ...`` per phase, then ``timer.read()`` (``{phase: seconds}``) once per step.

    ``device``: the step's compute device (``"cuda"`` times with events, anything else with the wall clock);
    ``event_factory``: makes the timing events (default: ``torch.cuda.Event(enable_timing=True)``), replaceable in
    tests by any object with ``record()``, ``synchronize()`` and ``elapsed_time(end)`` in milliseconds."""

    def __init__(self, device: Any = "cpu", event_factory: Callable[[], Any] | None = None):
        self.events = getattr(device, "type", str(device)) == "cuda" or event_factory is not None
        self._make_event = event_factory or cuda_event
        self._wall: dict[str, float] = {}
        self._pairs: list[tuple[str, Any, Any]] = []

    def __call__(self, phase: str):
        timer = self

        class _Ctx:
            def __enter__(self):
                if timer.events:
                    self.start = timer._make_event()
                    self.start.record()
                else:
                    self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                if timer.events:
                    end = timer._make_event()
                    end.record()
                    timer._pairs.append((phase, self.start, end))
                else:
                    timer._wall[phase] = timer._wall.get(phase, 0.0) + time.perf_counter() - self.t0

        return _Ctx()

    def read(self) -> dict[str, float]:
        """Seconds per phase so far. With events: waits for the last one (a no-op where the step has already
        synchronised, which is where the trainer calls it), then sums each phase's elapsed times."""
        if not self.events:
            return dict(self._wall)
        if self._pairs:
            self._pairs[-1][2].synchronize()  # events complete in stream order: the last one done means all are
        out: dict[str, float] = {}
        for phase, start, end in self._pairs:
            out[phase] = out.get(phase, 0.0) + start.elapsed_time(end) / 1000.0
        return out
