"""The device mesh FSDP2 shards the transformer over: ``cluster.mesh=fsdp`` or ``hsdp``.

- ``fsdp``: a 1-D mesh of every rank. Each block's parameters are sharded over all ranks, so every forward and
  backward all-gathers each block from every rank, across nodes too.
- ``hsdp``: hybrid sharding, a 2-D mesh ``(replicate, shard)`` (torchtitan's ``dp_replicate x dp_shard``). Parameters
  are sharded over the ``cluster.shard_size`` ranks of a shard group (default: the ranks of one node) and
  replicated across groups, so parameter all-gathers stay inside a node; gradients are reduce-scattered inside the
  group, then all-reduced across the replicas (one 1/shard_size slice per rank crosses nodes per update).

``fully_shard(module, mesh=<2-D mesh>)`` is how FSDP2 does HSDP, so every family's ``parallelize`` works unchanged on
either mesh. Ranks are laid out as SLURM numbers them (node-major): rank ``r`` is in replica ``r // shard_size`` at
shard index ``r % shard_size``, so with the default shard size a shard group is exactly one node.
"""

from __future__ import annotations

import os

from rewardflow.errors import ConfigError

MESH_KINDS = ("fsdp", "hsdp")


def mesh_shape(kind: str, world_size: int, ranks_per_node: int, shard_size: int | None = None) -> tuple[int, ...]:
    """``(world_size,)`` for ``fsdp``; ``(world_size // shard, shard)`` for ``hsdp``, where ``shard`` is
    ``shard_size`` or else ``ranks_per_node``. Raises :class:`ConfigError` naming the key and the fix."""
    if kind not in MESH_KINDS:
        raise ConfigError(
            f"cluster.mesh must be one of {', '.join(MESH_KINDS)} (got {kind!r}). Fix: cluster.mesh=fsdp "
            f"(shard over every rank) or cluster.mesh=hsdp (shard inside a node, replicate across)"
        )
    if kind == "fsdp":
        if shard_size is not None and shard_size != world_size:
            raise ConfigError(
                f"cluster.shard_size={shard_size} applies to cluster.mesh=hsdp only (fsdp shards over "
                f"all {world_size} ranks). Fix: cluster.mesh=hsdp, or drop cluster.shard_size"
            )
        return (world_size,)
    shard = ranks_per_node if shard_size is None else int(shard_size)
    if shard < 1 or world_size % shard:
        fits = [d for d in range(1, world_size + 1) if world_size % d == 0]
        raise ConfigError(
            f"cluster.shard_size={shard} must divide the {world_size} ranks of the job into equal shard "
            f"groups. Fix: cluster.shard_size one of {fits} (default: the {ranks_per_node} ranks of a "
            f"node, cluster.tasks_per_node)"
        )
    return (world_size // shard, shard)


def planned_world(cluster) -> tuple[int, int] | None:
    """``(world size, ranks per node)`` a cluster config will launch, or None for the in-process cluster."""
    if getattr(cluster, "tasks_per_node", None) is None:  # a DictConfig or the typed config object
        return None
    per_node = int(cluster.tasks_per_node)
    return int(getattr(cluster, "nodes", 1)) * per_node, per_node


def check_mesh_config(cluster) -> None:
    """The mesh keys against the ranks the cluster config asks for (before any process group exists)."""
    planned = planned_world(cluster)
    if planned is not None:
        mesh_shape(cluster.mesh, planned[0], planned[1], cluster.shard_size)


def build_mesh(cluster, world, device_type: str):
    """The ``DeviceMesh`` for this job's ranks (``world``: :class:`rewardflow.distributed.World`), named ``("shard",)``
    or ``("replicate", "shard")``. Ranks per node come from the job (``LOCAL_WORLD_SIZE``, which submitit and torchrun
    export), so the default shard group is a node even if the config was edited by hand."""
    from torch.distributed.device_mesh import init_device_mesh

    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world.world_size))
    # cluster=local has no mesh keys: ranks started by torchrun (or a bench's own processes) shard over all of them
    mesh, shard_size = getattr(cluster, "mesh", "fsdp"), getattr(cluster, "shard_size", None)
    shape = mesh_shape(mesh, world.world_size, per_node, shard_size)
    names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


def describe(mesh) -> str:
    """E.g. ``hsdp 2 x 4 (replicate x shard)`` or ``fsdp 8``, for the run's log."""
    if mesh.ndim == 1:
        return f"fsdp {mesh.size()}"
    return f"hsdp {mesh.size(0)} x {mesh.size(1)} (replicate x shard)"
