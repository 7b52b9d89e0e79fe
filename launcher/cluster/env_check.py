"""Checks of the environment variables the launcher reads, run with the config checks before anything is built
(:mod:`launcher.validate`): a value that cannot be used is a config error naming the variable and the fix, not a
traceback from deep inside a run (docs/configuration.md#environment-variables).

- ``WANDB_MODE`` (``logger=wandb``): W&B's own setting; a value W&B does not know fails ``wandb.init``.
- ``SLURM_CPUS_PER_TASK`` (``trainer.threads=0``): the torch threads of each process under SLURM.
- ``SLURM_RESTART_COUNT``: which attempt of a requeued SLURM job this is (the run dir's lock tells them apart).
- ``REWARDFLOW_CACHE`` (or ``cluster.cache_dir``, which sets it for the ranks): the folder of the tiny twins and
  the text-embedding cache.

The variables of a process group (``WORLD_SIZE``, ``RANK``, ``LOCAL_WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_PORT``)
are checked for their values here (:func:`process_group_problem`) and against the cluster by
:func:`launcher.cluster.device_check.stray_process_group`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rewardflow.errors import ConfigErrors

#: the modes W&B's settings take from WANDB_MODE (wandb.sdk.wandb_settings.Settings.mode)
WANDB_MODES = ("online", "offline", "disabled", "shared", "dryrun", "run")


def check_environment(cfg: Any, errors: ConfigErrors, env: Any = None) -> None:
    """Record in ``errors`` every variable of ``env`` (default: this process's environment) the run ``cfg`` would
    read and could not use."""
    env = os.environ if env is None else env
    if getattr(cfg.logger, "name", None) == "wandb" and "WANDB_MODE" in env:
        mode = env["WANDB_MODE"]
        errors.require(
            mode in WANDB_MODES,
            "environment WANDB_MODE",
            f"{mode!r} is not a W&B mode (W&B takes {', '.join(WANDB_MODES)}). Fix: `export WANDB_MODE=offline` "
            f"(or online, disabled), or `unset WANDB_MODE` to let logger.mode=auto choose",
        )
    if cfg.trainer.threads == 0 and "SLURM_CPUS_PER_TASK" in env:
        cpus = env["SLURM_CPUS_PER_TASK"]
        errors.require(
            _count(cpus, 1),
            "environment SLURM_CPUS_PER_TASK",
            f"{cpus!r} is not a whole number >= 1 (with trainer.threads=0 it sets the torch threads of each "
            f"process). Fix: `unset SLURM_CPUS_PER_TASK` outside a SLURM job, or set trainer.threads=<threads>",
        )
    restarts = restart_count_problem(env)
    errors.require(restarts is None, "environment SLURM_RESTART_COUNT", str(restarts))
    cache_dir = getattr(cfg.cluster, "cache_dir", None)
    if cache_dir:
        problem = _folder_problem(Path(cache_dir).expanduser())
        errors.require(
            problem is None,
            "cluster.cache_dir",
            f"{cache_dir!r} {problem}: the ranks' caches go there. Fix: point cluster.cache_dir at a folder, or "
            f"cluster.cache_dir=null",
        )
    elif env.get("REWARDFLOW_CACHE"):
        folder = env["REWARDFLOW_CACHE"]
        problem = _folder_problem(Path(folder).expanduser())
        errors.require(
            problem is None,
            "environment REWARDFLOW_CACHE",
            f"{folder!r} {problem}: rewardflow's caches (tiny twins, text embeddings) go there. Fix: `export "
            f"REWARDFLOW_CACHE=<a folder>`, or `unset REWARDFLOW_CACHE` (~/.cache/rewardflow)",
        )


#: a process group's variables (torchrun's, or left from one): name -> (least value, the variable it must stay below)
PROCESS_GROUP = {
    "WORLD_SIZE": (1, None),
    "RANK": (0, "WORLD_SIZE"),
    "LOCAL_WORLD_SIZE": (1, None),
    "LOCAL_RANK": (0, "LOCAL_WORLD_SIZE"),
    "MASTER_PORT": (1, None),
}


def process_group_problem(env: Any = None) -> str | None:
    """Why the process-group variables of ``env`` cannot be used (None if they can or are unset): whole numbers,
    ranks below their sizes, ``LOCAL_WORLD_SIZE`` at most ``WORLD_SIZE``, a port below 65536. The trainer reads them
    (the threads per process, the rendezvous), so they are checked before the run dir's lock is taken."""
    env = os.environ if env is None else env
    values: dict[str, int] = {}
    for name, (least, _) in PROCESS_GROUP.items():
        raw = env.get(name, "")
        if raw == "":
            continue
        if not _count(raw, least):
            return f"environment {name}={raw!r} is not a whole number >= {least}. Fix: `unset {name}`, or set it right"
        values[name] = int(raw)
    for name, (_, below) in PROCESS_GROUP.items():
        if below and name in values and below in values and values[name] >= values[below]:
            return (
                f"environment {name}={values[name]} is not below {below}={values[below]}. Fix: `unset {name} {below}`"
            )
    if values.get("LOCAL_WORLD_SIZE", 0) > values.get("WORLD_SIZE", values.get("LOCAL_WORLD_SIZE", 0)):
        return (
            f"environment LOCAL_WORLD_SIZE={values['LOCAL_WORLD_SIZE']} exceeds WORLD_SIZE={values['WORLD_SIZE']}. "
            f"Fix: `unset LOCAL_WORLD_SIZE WORLD_SIZE`"
        )
    if values.get("MASTER_PORT", 0) > 65535:
        return f"environment MASTER_PORT={values['MASTER_PORT']} is not a port (1-65535). Fix: `unset MASTER_PORT`"
    return None


def restart_count_problem(env: Any = None) -> str | None:
    """Why ``SLURM_RESTART_COUNT`` cannot be read (None if it can or is unset): the run dir's lock reads it before
    the config is checked, so the command line asks this first (:func:`launcher.cluster.device_check.stray_process_group`)."""
    count = (os.environ if env is None else env).get("SLURM_RESTART_COUNT", "")
    if count == "" or _count(count, 0):
        return None
    return (
        f"{count!r} is not a whole number >= 0 (SLURM counts a job's requeues in it). Fix: `unset "
        f"SLURM_RESTART_COUNT` (SLURM sets it in a requeued job)"
    )


def _count(value: str, least: int) -> bool:
    """Whether ``value`` is a whole number >= ``least`` as ``int()`` reads it."""
    try:
        return int(value) >= least
    except ValueError:
        return False


def _folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be a cache folder (None if it is one, or can be created): it, or the nearest of its
    parents that exists, is not a folder."""
    for path in (folder, *folder.parents):
        if path.is_dir():
            return None
        if path.exists() or path.is_symlink():
            what = "is not a folder" if path == folder else f"is inside {str(path)!r}, which is not a folder"
            return what + (" (a file)" if path.is_file() else "")
    return None
