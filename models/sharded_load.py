"""Sharded start-up, torchtitan style: no rank ever holds the whole transformer, on the host or the device.

Every rank builds the transformer on the meta device (no memory), the family's ``parallelize`` shards it with FSDP2
(``fully_shard`` per block), ``to_empty`` materialises only this rank's shards, and torch's distributed checkpoint
(``torch.distributed.checkpoint.HuggingFaceStorageReader``) reads exactly those slices from the diffusers
safetensors files (safetensors' lazy ``get_slice``, so the file is never read whole). The values are the file's,
converted to each parameter's dtype by ``copy_``, the same rounding ``from_pretrained(torch_dtype=...)`` applies, so
the sharded model is bit-identical to one loaded whole and then sharded (tests/test_sharded_startup.py).

Single-process runs keep diffusers' ``from_pretrained`` (see ``models/loading.py``); this path is taken whenever a
process group of more than one rank exists when the backbone is built (:func:`sharded_startup_enabled`).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

#: peft's name for the frozen weight a LoRA layer wraps (``to_q.weight`` becomes ``to_q.base_layer.weight``)
_PEFT_BASE = ".base_layer"


def sharded_startup_enabled() -> bool:
    """Sharded start-up whenever the run has more than one rank (the backbone is built after the process group)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def build_on_meta(cls, config: dict) -> nn.Module:
    """The transformer with its parameters on the meta device. Buffers (RoPE tables) are built for real: they are
    small, computed in ``__init__`` and absent from the checkpoint, so :func:`materialize_and_load` restores them."""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        return cls.from_config(config)


def cast_like_from_pretrained(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Cast floating parameters to ``dtype`` except those of the class's ``_keep_in_fp32_modules`` (what
    ``from_pretrained(torch_dtype=dtype)`` keeps in fp32, e.g. Wan's time embedder). Works on the meta device."""
    keep = set(getattr(module, "_keep_in_fp32_modules", None) or ())
    for name, param in module.named_parameters():
        if param.is_floating_point() and not keep.intersection(name.split(".")):
            param.data = param.data.to(dtype)
    return module


def weights_folder(path: str, subfolder: str, is_local: bool) -> Path:
    """The folder holding ``subfolder``'s safetensors files: inside a local ``model.path``, or the hub cache's
    snapshot of a hub id (fetched if missing and online; offline, the check at construction already failed)."""
    if is_local:
        return Path(os.path.expanduser(path)) / subfolder
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(path, allow_patterns=[f"{subfolder}/*"])) / subfolder


def checkpoint_key(name: str) -> str:
    """The safetensors key of a state-dict entry (peft's wrapped base weights keep their original names)."""
    return name.replace(_PEFT_BASE, "")


def is_adapter_key(name: str) -> bool:
    return "lora_" in name


def materialize_and_load(module: nn.Module, folder: Path, device: torch.device) -> None:
    """Allocate this rank's shards of ``module`` (built on meta, already sharded) on ``device`` and fill them from the
    safetensors files in ``folder``, each rank reading only its slices. LoRA adapters are left for the caller."""
    from torch.distributed.checkpoint import HuggingFaceStorageReader, load

    from models.loading import ModelLoadError

    buffers = {n: b.detach().clone() for n, b in module.named_buffers()}
    module.to_empty(device=device)
    with torch.no_grad():
        for name, buf in module.named_buffers():
            buf.copy_(buffers[name])
    reader = HuggingFaceStorageReader(str(folder))
    stored = reader.read_metadata().state_dict_metadata
    params = {n for n, _ in module.named_parameters()}
    # every parameter comes from the file; a persistent buffer only if the file has it (else the built one stays)
    targets = {
        checkpoint_key(k): v
        for k, v in module.state_dict().items()
        if not is_adapter_key(k) and (k in params or checkpoint_key(k) in stored)
    }
    missing = sorted(set(targets) - set(stored))
    if missing:
        raise ModelLoadError(
            f"{folder}: the safetensors files lack {len(missing)} weight(s) of "
            f"{type(module).__name__} (e.g. {missing[:3]}); the folder does not match the "
            f"transformer config. Fix: point model.path at a complete diffusers checkpoint"
        )
    load(targets, storage_reader=reader)


def lora_layers(module: nn.Module) -> list[tuple[str, nn.Module]]:
    from peft.tuners.lora import LoraLayer

    return [(n, m) for n, m in module.named_modules() if isinstance(m, LoraLayer)]


def initial_adapter_state(module: nn.Module, adapter_name: str, seed: int) -> dict[str, torch.Tensor]:
    """peft's ``init_lora_weights="gaussian"`` (A ~ N(0, 1/r^2), B = 0) drawn from a generator seeded with ``seed``,
    layer by layer in module order, as full fp32 tensors keyed like ``module.state_dict()``. The same values whether
    the adapters are real tensors or shards, so single-process and sharded start-ups train the same adapter."""
    g = torch.Generator().manual_seed(int(seed))
    state = {}
    for name, layer in lora_layers(module):
        a, b = layer.lora_A[adapter_name].weight, layer.lora_B[adapter_name].weight
        r = layer.r[adapter_name]
        state[f"{name}.lora_A.{adapter_name}.weight"] = torch.empty(a.shape).normal_(0.0, 1.0 / r, generator=g)
        state[f"{name}.lora_B.{adapter_name}.weight"] = torch.zeros(b.shape)
        if layer.lora_B[adapter_name].bias is not None:
            state[f"{name}.lora_B.{adapter_name}.bias"] = torch.zeros(layer.lora_B[adapter_name].bias.shape)
    return state


def load_adapters(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy full adapter tensors into ``module``'s adapter parameters (each rank keeps its own shard of each)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    params = dict(module.named_parameters())
    with torch.no_grad():
        for name, full in state.items():
            p = params[name]
            if isinstance(p, DTensor):
                local = distribute_tensor(full.to(p.dtype), p.device_mesh, p.placements, src_data_rank=None)
                p.to_local().copy_(local.to_local())
            else:
                p.copy_(full.to(p.dtype))
