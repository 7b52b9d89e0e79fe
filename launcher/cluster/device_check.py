"""Device honesty: the checks of ``model.device`` against this machine, and the run's first log line.

A real family (FLUX.1, SD3.5, Qwen-Image, Wan2.1 from their published weights) on the CPU would silently start a
run of hours per step in fp32, so it is refused unless the user says ``model.allow_cpu=true``; the tiny twins and
the SOC toy are made for the CPU. These checks run where the ranks run (the run itself, and the submitting process
of a local sweep); a ``cluster=slurm`` submit host usually has no GPU, so it leaves them to the job.
"""

from __future__ import annotations

import os
from typing import Any

from models.common_config import DiffusersModelConfig
from models.twins_config import TinyTwinConfig
from rewardflow.devices import Device, cuda_available, resolved_device
from rewardflow.dtypes import torch_dtype
from rewardflow.errors import ConfigErrors


def is_real_family(model: Any) -> bool:
    """A diffusers family loaded from published weights (not a tiny twin, not the toy)."""
    return isinstance(model, DiffusersModelConfig) and not isinstance(model, TinyTwinConfig)


def check_devices(cfg: Any, errors: ConfigErrors) -> None:
    m = cfg.model
    if getattr(m, "device", None) is None:
        return
    if not errors.require(
        m.device != Device.cuda or cuda_available(),
        "model.device",
        "is cuda but this process sees no CUDA GPU (torch.cuda.is_available() is False). Fix: run "
        "on a GPU node (cluster=slurm cluster.gpus_per_node=<n>), or model.device=auto",
    ):
        return
    errors.require(
        not is_real_family(m) or resolved_device(m.device) != Device.cpu or m.allow_cpu,
        "model.allow_cpu",
        f"model={m.name} would run on the CPU (no CUDA GPU here): its published "
        f"transformer has billions of parameters, so one step takes hours in fp32. Fix: run on a GPU "
        f"(cluster=slurm), use a CPU twin (model=tiny_{m.name}), or model.allow_cpu=true to run it anyway",
    )


def placement_record(cfg: Any, world_size: int) -> dict[str, Any]:
    """Where and how the run computes, resolved (``model.device=auto`` says neither): the device the transformer
    runs on, its dtype, the number of ranks and the mesh; the run dir's ``placement.json``
    (launcher/tracking/placement_file.py). ``time/gpu_hours`` is ranks x wall-clock, so it is
    GPU-hours only when ``device`` is ``cuda`` (launcher/compare/runs.py labels the axis by it)."""
    m = cfg.model
    device = str(resolved_device(m.device)) if getattr(m, "device", None) is not None else "cpu"
    dtype = str(torch_dtype(m.dtype, device)).removeprefix("torch.") if getattr(m, "dtype", None) else "float32"
    mesh = cfg.cluster.get("mesh", "fsdp") if world_size > 1 else "none"
    return {"device": device, "dtype": dtype, "world_size": world_size, "mesh": mesh}


def placement(cfg: Any, world_size: int) -> str:
    """``device cpu, dtype float32, world size 1, mesh none``: the run's first log line."""
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in placement_record(cfg, world_size).items())


def stray_process_group(cluster_name: str) -> str | None:
    """Why this process's environment contradicts ``cluster=local`` (None if it does not): ``WORLD_SIZE`` > 1
    outside submitit and outside torchrun (which sets ``TORCHELASTIC_RUN_ID``) is left over from another job or
    shell, and would make this one process wait for ranks that never come, up to the rendezvous timeout."""
    from launcher.cluster.env_check import process_group_problem, restart_count_problem

    restarts = restart_count_problem()
    if restarts:  # read by the run dir's lock, which the command line takes before the config checks
        return f"environment SLURM_RESTART_COUNT: {restarts}"
    values = process_group_problem()
    if values:
        return values
    world = os.environ.get("WORLD_SIZE", "1")
    if cluster_name != "local" or os.environ.get("TORCHELASTIC_RUN_ID"):
        return None
    if os.environ.get("SUBMITIT_EXECUTOR") or os.environ.get("SUBMITIT_LOCAL_JOB_ID"):
        return None
    try:
        stray = int(world) > 1
    except ValueError:
        return f"WORLD_SIZE={world!r} in the environment is not a number. Fix: unset WORLD_SIZE"
    if not stray:
        return None
    names = [k for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if k in os.environ]
    return (
        f"cluster=local runs one process, but the environment holds a process group's variables "
        f"({', '.join(f'{k}={os.environ[k]}' for k in names)}), left from another job or shell: this process "
        f"would wait for the other {int(world) - 1} rank(s) until the rendezvous timeout. Fix: `unset "
        f"{' '.join(names)}`, or run several processes with cluster=local_multi cluster.tasks_per_node={world}"
    )


def default_threads(world_local_size: int, env: Any = None, usable_cpus: int | None = None) -> int:
    """Torch threads per process (``trainer.threads=0``) from the CPUs this process may run on (its affinity mask:
    SLURM's task binding and cgroups restrict it; ``os.cpu_count()`` counts the whole node): SLURM's cpus-per-task
    when set (at most the usable CPUs), else the usable CPUs split over the node's local processes, which share one
    mask when nothing binds them (docs/clusters_multinode.md#multi-node-code-paths), and over the points of a
    ``cluster=local`` sweep that run side by side (``REWARDFLOW_PARALLEL_POINTS``, set by its launcher:
    launcher/cluster/local_sweep.py, docs/clusters.md#local-sweeps)."""
    env = os.environ if env is None else env
    usable = usable_cpus if usable_cpus is not None else _usable_cpus()
    if env.get("SLURM_CPUS_PER_TASK"):
        return max(1, min(int(env["SLURM_CPUS_PER_TASK"]), usable))
    points = max(1, int(env.get("REWARDFLOW_PARALLEL_POINTS") or 1))
    return max(1, usable // (max(1, world_local_size) * points))


def _usable_cpus() -> int:
    """CPUs this process may run on (``sched_getaffinity`` where the platform has it, e.g. not on macOS)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def rank_and_world_size() -> tuple[int, int]:
    """This process's rank and the job's number of ranks, before the process group exists (submitit's job
    environment, a torchrun-style environment, or one process)."""
    from rewardflow.distributed import submitit_job_env  # torch: not at composition time

    job = submitit_job_env()
    if job is not None:
        return job.global_rank, job.num_tasks
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
