"""Measured peak GPU memory per phase of a step beside the plan's figures (``memory/*`` in docs/metrics.md).

On CUDA each phase starts with ``torch.cuda.reset_peak_memory_stats()`` and ends reading
``torch.cuda.max_memory_allocated()``: the largest memory the caching allocator handed to tensors during the phase
(the plan's lines; what the allocator reserves beyond that is in the plan's fixed CUDA allowance). The allocator
counts at allocation, on the host, so no device synchronisation is needed. A step's phase called several times keeps
its largest peak. Rank 0's figures are logged (the plan is per rank and the ranks hold equal shares).

On the CPU nothing is measured: no allocator records a resettable peak per phase (the process's ``ru_maxrss`` only
grows), so a figure would mix phases; ``scripts/bench_memory.py`` measures the CPU phases on its own.
"""

from __future__ import annotations

from typing import Any, Callable

GiB = float(2**30)


class PhaseMemory:
    """``with memory("rollout"): ...`` records the phase's peak; :meth:`metrics` gives the step's figures.

    ``plan``: the run's memory plan (launcher/plan/memory_plan.py) or None; ``cuda``: measure with CUDA's allocator.
    ``reset`` and ``peak`` replace the allocator's functions (tests)."""

    def __init__(
        self,
        plan: Any = None,
        cuda: bool = False,
        reset: Callable[[], None] | None = None,
        peak: Callable[[], int] | None = None,
    ):
        self.plan = plan
        self.enabled = cuda or (reset is not None and peak is not None)
        if cuda and reset is None:
            import torch

            reset, peak = torch.cuda.reset_peak_memory_stats, torch.cuda.max_memory_allocated
        self._reset, self._peak = reset, peak
        self.peaks: dict[str, float] = {}

    def __call__(self, phase: str):
        memory = self

        class _Ctx:
            def __enter__(self):
                if memory.enabled:
                    memory._reset()

            def __exit__(self, *exc):
                if memory.enabled:
                    peak = float(memory._peak()) / GiB
                    memory.peaks[phase] = max(peak, memory.peaks.get(phase, 0.0))

        return _Ctx()

    def metrics(self) -> dict[str, float]:
        """``memory/<phase>_peak_gib`` measured this step (then forgotten) and, with a plan, the planned
        ``memory/planned_rollout_gib`` (sampling, decoding and scoring: the measured rollout and reward phases),
        ``memory/planned_update_gib`` and ``memory/planned_peak_gib`` (without the plan's CUDA allowance); nothing
        when nothing is measured."""
        if not self.enabled:
            return {}
        out = {f"memory/{phase}_peak_gib": gib for phase, gib in self.peaks.items()}
        self.peaks = {}
        if self.plan is not None:  # the plan's tensors, without its CUDA allowance (the allocator's peak has none)
            allowance = self.plan.overhead
            out["memory/planned_rollout_gib"] = (self.plan.phase("rollout") - allowance) / GiB
            out["memory/planned_update_gib"] = (self.plan.phase("update") - allowance) / GiB
            out["memory/planned_peak_gib"] = (self.plan.peak - allowance) / GiB
        return out
