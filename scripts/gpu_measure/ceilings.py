"""The two ceilings every other figure is read against: the bf16 matmul rate (MFU's denominator) and the memory
bandwidth (a device-to-device copy, bytes read plus written), with the host<->device copy rates that offloading and
the rollouts' transfers see: pageable vs pinned host memory, each direction."""

from __future__ import annotations

import statistics
import time

import torch

from gpu_measure.profile import Check
from gpu_measure.record import Recorder
from gpu_measure.timing import sync, timed

MATMUL_REPS = 20


def matmul_tflops(device: torch.device, n: int, reps: int = MATMUL_REPS, dtype: torch.dtype = torch.bfloat16) -> float:
    """``n x n @ n x n`` in ``dtype`` (bf16: MFU's usual denominator) on random data (zeros run faster than real
    data): 3 warm-ups, then the median of 3 timings of ``reps`` products back to back, 2 n^3 FLOPs each."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    for _ in range(3):
        a @ b
    dt = statistics.median(timed(device, lambda: [a @ b for _ in range(reps)])[0] for _ in range(3))
    return 2 * n**3 * reps / dt / 1e12


def _copy_gbs(
    device: torch.device, dst: torch.Tensor, src: torch.Tensor, reps: int = 5, bytes_per_copy: int | None = None
) -> float:
    """GB/s of ``dst.copy_(src)`` (median of ``reps``; non-blocking where a side is pinned)."""
    nbytes = bytes_per_copy or src.numel() * src.element_size()
    blocking = not (src.is_pinned() or dst.is_pinned())
    dst.copy_(src, non_blocking=not blocking)
    sync(device)
    times = []
    for _ in range(reps):
        dt, _ = timed(device, lambda: dst.copy_(src, non_blocking=not blocking))
        times.append(dt)
    return nbytes / statistics.median(times) / 1e9


def section_ceilings(chk: Check, rec: Recorder, allowance: float) -> None:
    device, n = chk.device, chk.profile.matmul_n
    t0 = time.monotonic()
    tflops = matmul_tflops(device, n)
    chk.ceiling_tflops = tflops
    rec.write(
        "ceilings",
        f"matmul bf16 {n}^3",
        tflops=tflops,
        seconds=2 * n**3 / tflops / 1e12,
        value=f"{tflops:.4g} TFLOP/s",
        reps=MATMUL_REPS,
        wall_s=round(time.monotonic() - t0, 2),
    )

    nbytes = chk.profile.copy_mib * 2**20
    on_device = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(7)
    other = torch.empty_like(on_device)
    # read + written: the memory system's ceiling for bandwidth-bound kernels
    gbs = _copy_gbs(device, other, on_device, bytes_per_copy=2 * nbytes)
    rec.write(
        "ceilings",
        "copy device->device",
        value=f"{gbs:.4g} GB/s (read + written)",
        gb_per_s=gbs,
        mib=chk.profile.copy_mib,
    )
    del other
    pageable = torch.empty(nbytes, dtype=torch.uint8).fill_(7)  # pages touched before timing
    for direction, dst, src in (("host->device", on_device, pageable), ("device->host", pageable, on_device)):
        gbs = _copy_gbs(device, dst, src)
        rec.write(
            "ceilings", f"copy {direction} pageable", value=f"{gbs:.3g} GB/s", gb_per_s=gbs, mib=chk.profile.copy_mib
        )
    if device.type != "cuda":
        rec.write("ceilings", "copy host<->device pinned", status="skipped", reason="pinned memory needs CUDA")
        return
    pinned = pageable.pin_memory()
    del pageable
    for direction, dst, src in (("host->device", on_device, pinned), ("device->host", pinned, on_device)):
        gbs = _copy_gbs(device, dst, src)
        rec.write(
            "ceilings", f"copy {direction} pinned", value=f"{gbs:.3g} GB/s", gb_per_s=gbs, mib=chk.profile.copy_mib
        )
