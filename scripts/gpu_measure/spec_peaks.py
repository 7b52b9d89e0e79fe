"""The datasheet's dense bf16 tensor-core peak of a GPU (the denominator of the usual MFU, Chowdhery et al. 2022,
PaLM, appendix B), by device name, beside the measured matmul ceiling (``ceilings``): MFU against the spec says how far
the run is from the hardware's promise, MFU against the ceiling how far it is from what a plain GEMM reaches here.

Figures are NVIDIA's datasheets' dense (no 2:4 sparsity) BF16 tensor TFLOP/s of the SXM parts unless the name says
otherwise; a device missing from the table gets ``None`` and the check prints "n/a" rather than a guess.
"""

from __future__ import annotations

import torch

#: (substring of ``torch.cuda.get_device_name()``, dense bf16 TFLOP/s); the first match wins, so longer names first
SPEC_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GH200", 989.4),
    ("H200", 989.4),  # H200 SXM datasheet: 1979 TFLOP/s with sparsity, half of it dense
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.5),
    ("H100", 989.4),
    ("H800", 989.4),
    ("B200", 2250.0),
    ("B100", 1750.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.1),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("A10", 125.0),
    ("RTX 4090", 165.2),
    ("RTX 6000 Ada", 364.2),
)


def spec_peak_tflops(device: torch.device) -> tuple[float | None, str]:
    """``(dense bf16 TFLOP/s, the name it was looked up by)``; ``(None, reason)`` on the CPU or an unlisted GPU."""
    if device.type != "cuda":
        return None, "n/a on CPU (no datasheet tensor-core peak)"
    name = torch.cuda.get_device_name(device)
    for key, tflops in SPEC_BF16_TFLOPS:
        if key in name:
            return tflops, name
    return None, f"n/a: {name} is not in scripts/gpu_measure/spec_peaks.py"


def mfu(flop: float | None, seconds: float | None, peak_tflops: float | None) -> float | None:
    """FLOPs per second over a peak in TFLOP/s; None when a figure is missing."""
    if not flop or not seconds or not peak_tflops:
        return None
    return flop / seconds / (peak_tflops * 1e12)
