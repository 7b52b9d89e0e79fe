"""Which CUDA device a rank uses, whether the site shows each task all of a node's GPUs or binds one per task.

Sites differ (docs/clusters_multinode.md#multi-node-code-paths): with ``--gpus-per-node`` alone every task sees the
node's GPUs and ``LOCAL_RANK`` picks one; with ``--gpus-per-task=1``, ``--gpu-bind=single:1`` or a cgroup per task,
SLURM sets ``CUDA_VISIBLE_DEVICES`` to that task's GPU only, so device ``LOCAL_RANK`` does not exist for any rank but
the first (``torch.cuda.set_device(local_rank)`` fails with "invalid device ordinal"). submitit is told not to
rewrite ``CUDA_VISIBLE_DEVICES`` (rewardflow/distributed.py), so it is the site's.
"""

from __future__ import annotations

import os
from typing import Any


def visible_gpus(env: Any = None, device_count: int | None = None) -> int:
    """GPUs this process sees: ``device_count`` (torch's, which applies ``CUDA_VISIBLE_DEVICES``) when given, else
    the entries of ``CUDA_VISIBLE_DEVICES`` of ``env`` (default: this process's), else torch's count."""
    if device_count is not None:
        return device_count
    listed = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if listed is not None and listed.strip() != "":
        return len([d for d in listed.split(",") if d.strip()])
    import torch

    return torch.cuda.device_count()


def cuda_device_index(local_rank: int, env: Any = None, device_count: int | None = None) -> int:
    """The device index of a rank among the GPUs it sees (:func:`visible_gpus`): 0 when the task sees one (bound
    per task), ``local_rank`` when it sees the node's; ``local_rank % visible`` when it sees a subset of several
    (e.g. ``--gpus-per-task=2``: each task's own GPUs, so distinct ranks still get distinct physical GPUs)."""
    visible = visible_gpus(env, device_count)
    if visible < 1:
        raise RuntimeError(
            f"the rank with LOCAL_RANK={local_rank} sees no CUDA GPU (CUDA_VISIBLE_DEVICES="
            f"{(os.environ if env is None else env).get('CUDA_VISIBLE_DEVICES')!r}). Fix: ask SLURM for GPUs "
            f"(cluster.gpus_per_node) or check the site's GPU binding"
        )
    return 0 if visible == 1 else local_rank % visible
