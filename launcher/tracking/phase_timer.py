"""Wall-clock seconds per phase of a step (``time/<phase>_s`` in docs/metrics.md), accumulated across the step's
calls of each phase."""

from __future__ import annotations

import time


class PhaseTimer:
    """Accumulates wall-clock seconds per phase of a step."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def __call__(self, phase: str):
        timer = self

        class _Ctx:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.seconds[phase] = timer.seconds.get(phase, 0.0) + time.perf_counter() - self.t0

        return _Ctx()
