"""Timing one pass on the device: the work queued on the GPU counted (synchronised before and after), a first call
that doubles as the warm-up and counts the FLOPs (``torch.utils.flop_counter.FlopCounterMode``), then timed
repetitions as far as the time allowed goes, their median reported with the peak memory."""

from __future__ import annotations

import gc
import statistics
import time
from typing import Callable

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn: Callable[[], object]) -> tuple[float, object]:
    """Seconds of ``fn()`` with the device's queued work counted."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


def free_memory(device: torch.device, collect: bool = True) -> None:
    """Give cached device memory back; ``collect`` first runs the garbage collector (about a second with torch and
    diffusers loaded: once per model, not per measurement, unless reference cycles may hold tensors, as after an
    out-of-memory error)."""
    if collect:
        gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None


def first_line(e: BaseException, limit: int = 300) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:limit]


def count_flops(fn: Callable[[], object]) -> tuple[object, int, dict[str, int]]:
    """``fn()`` under ``FlopCounterMode``: its result, the FLOPs executed and their split by aten op (matmuls,
    attention, convolutions: the ops the counter has formulas for; elementwise work is not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        out = fn()
    by_op = {str(op).removeprefix("aten."): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return out, int(counter.get_total_flops()), by_op


def measure_pass(
    device: torch.device, fn: Callable[[], object], max_reps: int, budget_s: float, flops: bool = True
) -> dict:
    """Warm-up (FLOPs counted when ``flops``), then up to ``max_reps`` timed calls, as many as ``budget_s`` allows
    after the warm-up (at least one). Returns seconds (median), reps, warmup_s, executed_tflop, flop_by_op,
    peak_gib and ``out``, the last call's result."""
    reset_peak(device)
    t0 = time.monotonic()
    if flops:
        warm_s, (out, n_flops, by_op) = timed(device, lambda: count_flops(fn))
    else:
        (warm_s, out), n_flops, by_op = timed(device, fn), None, None
    del out
    left = budget_s - (time.monotonic() - t0)
    reps = max(1, min(max_reps, int(left / max(warm_s, 1e-6))))
    times = []
    for _ in range(reps):
        dt, out = timed(device, fn)
        times.append(dt)
    return dict(
        seconds=statistics.median(times),
        reps=reps,
        warmup_s=round(warm_s, 4),
        executed_tflop=None if n_flops is None else n_flops / 1e12,
        flop_by_op=by_op,
        peak_gib=peak_gib(device),
        out=out,
    )
