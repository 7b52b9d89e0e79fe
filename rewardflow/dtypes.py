"""Compute dtypes as config values (``model.dtype``, ``reward.dtype``) and what they mean on a device."""

from __future__ import annotations

from enum import StrEnum


class Dtype(StrEnum):
    auto = "auto"  # bf16 on a GPU, fp32 on the CPU (bf16 is emulated there and 1.5-6x slower,
    # docs/development.md#bf16-on-the-cpu)
    float64 = "float64"
    fp64 = "fp64"
    float32 = "float32"
    fp32 = "fp32"
    bfloat16 = "bfloat16"
    bf16 = "bf16"
    float16 = "float16"
    fp16 = "fp16"


def torch_dtype(dtype: str, device_type: str = "cpu"):
    """The torch dtype of ``dtype`` on a device of type ``device_type`` (``auto``: bf16 on CUDA, fp32 elsewhere)."""
    import torch

    if dtype == Dtype.auto:
        return torch.bfloat16 if device_type == "cuda" else torch.float32
    return {
        "float64": torch.float64,
        "fp64": torch.float64,
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }[str(dtype)]
