"""Configs of the cluster group: where a run's processes come from.

``local`` runs in-process. ``local_multi`` and ``slurm`` go through hydra-submitit-launcher (their YAML sets
``hydra.mode=MULTIRUN`` and the launcher from these keys): every task is one training rank, and the trainer builds
the process group from submitit's job environment (never torchrun inside a task).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import II


@dataclass
class GpuFields:
    gpu_mem_gb: float = 80.0  # memory of one GPU, for the memory plan (docs/memory.md)


@dataclass
class LocalClusterConfig(GpuFields):
    name: str = "local"  # one training process per run
    # sweep points run side by side, >= 1; each one's automatic torch threads: usable CPUs / parallel
    # (launcher/cluster/local_sweep.py, docs/clusters.md#local-sweeps)
    parallel: int = 1


@dataclass
class MultiRankFields(GpuFields):
    """Keys of every cluster whose ranks are separate processes (launcher/cluster/mesh.py, launcher/cluster/node_cache.py)."""

    mesh: str = "fsdp"  # FSDP2 mesh: fsdp (shard over all ranks) | hsdp (shard in groups, replicate)
    shard_size: Optional[int] = None  # hsdp: ranks per shard group (default: the ranks of one node)
    cache_dir: Optional[str] = None  # the ranks' REWARDFLOW_CACHE (twins, ...); node-local: filled once per node


@dataclass
class LocalMultiClusterConfig(MultiRankFields):
    name: str = "local_multi"
    tasks_per_node: int = 2  # training processes on this machine (gloo on CPU), >= 1; they divide prompts_per_step
    cpus_per_task: Optional[int] = None  # torch threads per process, >= 1 (default: cores / tasks)
    timeout_min: int = 60
    collective_timeout_s: int = 300  # a collective waiting longer than this fails the job (a dead rank)


@dataclass
class SlurmClusterConfig(MultiRankFields):
    name: str = "slurm"
    nodes: int = 1
    gpus_per_node: int = 8
    tasks_per_node: int = II(".gpus_per_node")  # one task per GPU
    # the defaults below are computed when the config is composed (launcher/cluster/cluster_defaults.py); a value
    # the user sets replaces them; null leaves the flag to the site (docs/clusters.md#what-a-job-asks-slurm-for)
    mesh: str = II("rf_mesh:${.nodes}")  # hsdp from 2 nodes on, fsdp on one
    # min(8, 64 // tasks_per_node); gpus_per_node=0 (a CPU job, node shape unknown): null
    cpus_per_task: Optional[int] = II("rf_cpus_per_task:${.gpus_per_node},${.tasks_per_node}")
    # host memory per node, GiB: the ranks' planned host memory x 1.25; gpus_per_node=0: null
    mem_gb: Optional[int] = II("rf_mem_gb:${.gpus_per_node}")
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    timeout_min: int = 240
    signal_delay_s: int = II("rf_signal_delay_s:")  # USR2 this long before the time limit: 2 x (planned checkpoint
    # write time + 120 s), whole minutes; the first half trains on, the second writes the last checkpoint
    max_num_timeout: int = 20  # requeues on time-out (submitit's default 0 would never requeue)
    setup: list[str] = field(default_factory=list)  # shell lines run in the sbatch script before srun
    additional_parameters: dict[str, Any] = field(default_factory=dict)  # any other sbatch flag: {exclude: node3}
    array_parallelism: int = 256  # a sweep's jobs running at once (sbatch --array=...%N)
    collective_timeout_s: int = 600
    wait: bool = True  # false: submit, print the job ids and return (rewardflow-status follows them)
    # these keys are the only place rewardflow reads SLURM values: hydra/launcher=rewardflow_slurm takes them by
    # interpolation, and a hydra.launcher.* value that contradicts them is an error (launcher/cluster/slurm_launcher.py)


SCHEMAS = {
    "cluster": {"local": LocalClusterConfig, "local_multi": LocalMultiClusterConfig, "slurm": SlurmClusterConfig}
}
