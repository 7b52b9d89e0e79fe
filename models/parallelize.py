"""FSDP2 sharding of a family's transformer, torchtitan style: activation checkpointing, then ``fully_shard`` on
each transformer block with an explicit ``MixedPrecisionPolicy``, and the root module last. The blocks are what the
family's backbone declares in ``block_attrs`` (``DiffusersBackbone.parallelize``), one FSDP unit each.

Frozen encoders (text encoders, VAE) are never passed here: they stay replicated and outside the sharded model.
LoRA adapters must be added *before* sharding (docs/development.md#fsdp2-on-the-cpu); FSDP2 handles frozen and
trainable parameters mixed in one group.
"""

from __future__ import annotations

import warnings
from typing import Iterable

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

# diffusers blocks return views; FSDP2 warns about in-place ops on them, which these models never do
# (docs/development.md#fsdp2-on-the-cpu)
warnings.filterwarnings("ignore", message=".*returned a view tensor.*", category=UserWarning)


def mixed_precision_policy(device_type: str) -> MixedPrecisionPolicy:
    """bf16 compute with fp32 gradient reduction on GPUs; plain fp32 on CPU (no bf16 hardware there)."""
    if device_type == "cuda":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def transformer_blocks(model: nn.Module, block_attrs: Iterable[str]) -> list[nn.Module]:
    """The blocks of ``model`` listed under the attribute names ``block_attrs``, in forward order."""
    return [block for attr in block_attrs for block in getattr(model, attr)]


def parallelize_blocks(
    model: nn.Module,
    blocks: Iterable[nn.Module],
    mesh: DeviceMesh,
    mp_policy: MixedPrecisionPolicy | None = None,
    reshard_after_forward: bool = True,
    activation_checkpointing: bool = False,
    ignored_params: set[nn.Parameter] | None = None,
) -> nn.Module:
    """Shard every block in ``blocks`` as its own FSDP unit, then the root (which holds everything else).
    ``ignored_params`` stay whole on every rank (a replicated frozen LoRA base: no all-gather per forward)."""
    if activation_checkpointing:
        if not hasattr(model, "enable_gradient_checkpointing"):
            raise ValueError(f"{type(model).__name__} has no gradient checkpointing support")
        model.enable_gradient_checkpointing()
    mp_policy = mp_policy or mixed_precision_policy(mesh.device_type)
    ignored = ignored_params or set()
    for block in [*blocks, model]:
        fully_shard(
            block,
            mesh=mesh,
            mp_policy=mp_policy,
            reshard_after_forward=reshard_after_forward,
            ignored_params=ignored.intersection(block.parameters()) or None,
        )
    return model


def is_sharded(module: nn.Module) -> bool:
    return isinstance(module, FSDPModule)
