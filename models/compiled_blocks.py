"""Compiled transformer blocks (``model.compile=true``; docs/performance.md#compiled-blocks).

Each transformer block is compiled in place with ``nn.Module.compile`` before FSDP2 shards it, as torchtitan's
``apply_compile`` does (per block: the blocks share one structure, so the compiled code is reused and a graph break
stays inside one block; the embedders and the output layer stay eager). In-place compilation keeps the module, its
parameter names, hooks and state dict, so LoRA adapters, activation checkpointing, FSDP2, DCP checkpoints and
exports see the same model. The first calls at each new row count compile (minutes on a CPU, seconds to a minute
on a GPU); shapes then mark themselves dynamic.
"""

from __future__ import annotations

import shutil
from typing import Iterable

import torch
from torch import nn

from rewardflow.errors import ConfigError


def compile_unavailable_reason(device: torch.device) -> str | None:
    """Why ``torch.compile``'s default backend (inductor) cannot run on ``device`` here, or None when it can."""
    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile (TorchDynamo) is not supported on this Python / platform"
    if device.type == "cuda":
        try:
            import triton  # noqa: F401 - inductor's GPU code generator
        except ImportError:
            return "inductor needs triton on a GPU and it is not installed"
    elif not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        return "inductor needs a C++ compiler (g++ or clang++) on the CPU and none is on PATH"
    return None


def compile_blocks(blocks: Iterable[nn.Module], device: torch.device) -> int:
    """Compile every block in place; raises a :class:`ConfigError` (``model.compile``) when compilation cannot run
    here. Returns the number of blocks compiled."""
    reason = compile_unavailable_reason(device)
    if reason is not None:
        raise ConfigError(f"model.compile=true: {reason}. Fix: model.compile=false")
    n = 0
    for block in blocks:
        block.compile()
        n += 1
    return n
