"""Collectives that methods use without caring whether the run has one process or many.

Every helper degrades to the identity when ``torch.distributed`` is not initialised, so a method's code is the same
for 1 and N processes (e.g. Flow-GRPO gathers rewards across ranks before per-prompt advantages).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def current_world() -> World:
    if dist.is_available() and dist.is_initialized():
        import os

        return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return World()


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_gather_cat(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate equal-shaped tensors of all ranks along dim 0, in rank order (no gradient)."""
    if not _active():
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def all_gather_objects(obj) -> list:
    """Python objects of all ranks, in rank order."""
    if not _active():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum over ranks (returns a new tensor; the input is not modified)."""
    if not _active():
        return tensor.clone()
    out = tensor.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
