"""The ``cluster=slurm`` keys whose defaults depend on the run: set when the config is composed, from the plan and
the node shape, as OmegaConf resolvers in the schema's defaults (launcher/cluster/cluster_config.py), so
``rewardflow --cfg job --resolve`` prints them and a value the user sets replaces the interpolation
(docs/clusters.md#what-a-job-asks-slurm-for):

- ``cluster.mesh``: ``hsdp`` from 2 nodes on (parameter all-gathers stay on a node's NVLink;
  docs/clusters_multinode.md), ``fsdp`` on one node (the same mesh there);
- ``cluster.cpus_per_task``: :func:`cpus_per_task`;
- ``cluster.mem_gb``: the node's ranks' host memory (launcher/plan/host_memory.py);
  both stay null (the site's defaults) with ``cluster.gpus_per_node=0``, whose node shape nothing here knows;
- ``cluster.signal_delay_s``: twice the planned checkpoint time plus a step (launcher/plan/checkpoint_size.py).

The sbatch flags of a sweep come from its first point's config (hydra-submitit-launcher builds one launcher for the
sweep), so a sweep over models asks for the first one's memory: set ``cluster.mem_gb`` for a sweep of mixed sizes.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from rewardflow.errors import ConfigErrors

#: CPUs a node is assumed to have at least: the smallest common 8-GPU nodes have 64 (hardware threads, as SLURM
#: counts them); DGX A100/H100 nodes 256 and 224
NODE_CPUS = 64
#: CPUs a rank uses well: its torch threads for the host side of the transformer calls, data, reward pre-processing
MAX_CPUS_PER_TASK = 8
#: the cluster keys the plan reads (the derived keys are left out: resolving them inside their own resolver recurses)
PLAN_CLUSTER_KEYS = ("name", "nodes", "tasks_per_node", "gpus_per_node", "mesh", "shard_size", "gpu_mem_gb")


def default_mesh(nodes: Any) -> str:
    return "hsdp" if int(nodes) > 1 else "fsdp"


def cpus_per_task(gpus_per_node: Any, tasks_per_node: Any) -> int | None:
    """``min(MAX_CPUS_PER_TASK, NODE_CPUS // tasks_per_node)``, at least 1: 8 for 8 ranks a node. None (the site's
    default) for a job without GPUs: the figures are for GPU nodes, and a CPU node's shape is unknown here."""
    if not int(gpus_per_node):
        return None
    return max(1, min(MAX_CPUS_PER_TASK, NODE_CPUS // max(1, int(tasks_per_node))))


def plan_input(root: DictConfig) -> dict:
    """The parts of the composed config the host and checkpoint estimates read, as plain values."""

    def part(key: str) -> dict:
        node = root.get(key)
        return OmegaConf.to_container(node, resolve=True, enum_to_str=True) if node is not None else {}  # type: ignore[return-value]

    cluster = root.cluster
    return {
        **{key: part(key) for key in ("model", "method", "reward", "trainer", "optimizer")},
        "cluster": {key: cluster.get(key) for key in PLAN_CLUSTER_KEYS if key in cluster},
    }


def _mem_gb(gpus_per_node: Any, *, _root_: DictConfig) -> int | None:
    """The node's ranks' planned host memory; None (the site's default) for a job without GPUs, as above."""
    from launcher.plan.host_memory import mem_gb

    if not int(gpus_per_node):
        return None

    return mem_gb(plan_input(_root_))


def _signal_delay_s(*, _root_: DictConfig) -> int:
    from launcher.plan.checkpoint_size import signal_delay_s

    return signal_delay_s(plan_input(_root_))


def register_resolvers() -> None:
    """``rf_mesh``, ``rf_cpus_per_task``, ``rf_mem_gb`` and ``rf_signal_delay_s`` (launcher/config.py registers them
    with the others before any config is composed)."""
    OmegaConf.register_new_resolver("rf_mesh", default_mesh, replace=True)
    OmegaConf.register_new_resolver("rf_cpus_per_task", cpus_per_task, replace=True)
    OmegaConf.register_new_resolver("rf_mem_gb", _mem_gb, replace=True)
    OmegaConf.register_new_resolver("rf_signal_delay_s", _signal_delay_s, replace=True)


def check_cluster_resources(cluster: Any, errors: ConfigErrors) -> None:
    """``cluster.mem_gb`` and ``cluster.signal_delay_s`` against what SLURM can use (``cpus_per_task``:
    launcher/validate.py's rank checks)."""
    if getattr(cluster, "name", None) != "slurm":
        return
    mem = cluster.mem_gb
    errors.require(
        mem is None or mem >= 1,
        "cluster.mem_gb",
        f"must be >= 1 or null (got {mem}): host memory per node in GiB (null: the site's default). Fix: drop the "
        f"override for the planned figure, or cluster.mem_gb=<GiB per node>",
    )
    delay, limit_s = cluster.signal_delay_s, int(cluster.timeout_min) * 60
    errors.require(
        0 <= delay < limit_s,
        "cluster.signal_delay_s",
        f"must be >= 0 and below the time limit (cluster.timeout_min={cluster.timeout_min} = {limit_s} s), got "
        f"{delay}: SLURM would signal the job as it starts. Fix: raise cluster.timeout_min, or "
        f"cluster.signal_delay_s=<seconds the last checkpoint needs, x 2>",
    )
