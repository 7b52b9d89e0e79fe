"""Compute devices as config values (``model.device``) and which one ``auto`` means on this machine."""

from __future__ import annotations

from enum import StrEnum


class Device(StrEnum):
    auto = "auto"  # cuda if this process sees a CUDA GPU, else cpu
    cpu = "cpu"
    cuda = "cuda"  # the rank's GPU (each rank of a multi-GPU job is pinned to its own)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def resolved_device(device: str) -> str:
    """``cpu`` or ``cuda``: what ``device`` runs on here (``auto`` picks cuda when a GPU is visible)."""
    if device == Device.auto:
        return Device.cuda if cuda_available() else Device.cpu
    return Device(device)
