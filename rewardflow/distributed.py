"""Collectives that methods use without caring whether the run has one process or many.

Every helper degrades to the identity when ``torch.distributed`` is not initialised, so a method's code is the same
for 1 and N processes (e.g. Flow-GRPO gathers rewards across ranks before per-prompt advantages).
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


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
        return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return World()


def submitit_job_env():
    """submitit's JobEnvironment when this process is a submitit task (SLURM or local executor), else None."""
    if not (os.environ.get("SUBMITIT_EXECUTOR") or os.environ.get("SUBMITIT_LOCAL_JOB_ID")):
        return None
    try:
        import submitit

        return submitit.JobEnvironment()
    except RuntimeError:
        return None


def init_distributed(collective_timeout_s: int = 600) -> World:
    """Join the job's process group, if the job has several tasks.

    Inside a submitit task the rendezvous comes from submitit's job environment (``TorchDistributedEnvironment``
    exports MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK); a torchrun-style environment also works. NCCL on GPUs,
    gloo on CPU. ``collective_timeout_s`` bounds how long a rank waits for a dead peer before the job fails.
    """
    if dist.is_initialized():
        return current_world()
    env = submitit_job_env()
    if env is not None and env.num_tasks > 1:
        import submitit

        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return World()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":  # one GPU visible per task on some sites, all of the node's on others
        from rewardflow.gpu_binding import cuda_device_index

        torch.cuda.set_device(cuda_device_index(local_rank, device_count=torch.cuda.device_count()))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=collective_timeout_s))
    world = current_world()
    log.info("rank %d/%d (local %d) joined the %s process group", world.rank, world.world_size, local_rank, backend)
    return world


def barrier() -> None:
    if _active():
        dist.barrier()


def broadcast_object(obj, src: int = 0):
    """``obj`` of rank ``src`` on every rank."""
    if not _active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def any_rank(flag: bool) -> bool:
    """True on every rank if ``flag`` is true on at least one (so all ranks take the same branch)."""
    if not _active():
        return bool(flag)
    t = torch.tensor([1.0 if flag else 0.0], device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def collective_device() -> torch.device:
    """NCCL only moves CUDA tensors; gloo works on CPU tensors."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


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
