"""Can this machine queue SLURM jobs? Asked before a ``cluster=slurm`` sweep submits anything.

Without this, a machine without SLURM ended in submitit's raw ``Could not detect "srun"``, and one whose controller is
unreachable or whose ``cluster.partition`` does not exist failed inside ``sbatch`` after the sweep folder was made.
``sinfo`` answers all three questions in one call.
"""

from __future__ import annotations

import shutil
import subprocess

from omegaconf import DictConfig

#: seconds to wait for the controller's answer (sinfo's own retries would take minutes)
SINFO_TIMEOUT_S = 15


def partitions() -> list[str]:
    """The cluster's partition names (raises ``OSError`` / ``subprocess`` errors when the controller cannot answer)."""
    out = subprocess.run(
        ["sinfo", "--noheader", "--format=%R"], capture_output=True, text=True, check=True, timeout=SINFO_TIMEOUT_S
    ).stdout
    return sorted({line.strip() for line in out.splitlines() if line.strip()})


def slurm_problem(config: DictConfig) -> str | None:
    """Why ``cluster=slurm`` cannot queue its jobs from here (None if it can): no SLURM commands, no answer from the
    controller, or an unknown ``cluster.partition``."""
    missing = [c for c in ("sbatch", "sinfo", "srun") if shutil.which(c) is None]
    if missing:
        return (
            f"SLURM's commands ({', '.join(missing)}) are not on this machine's PATH. Fix: run the command on a "
            f"SLURM login node, or use cluster=local (one process) or cluster=local_multi (ranks on this machine)"
        )
    try:
        names = partitions()
    except subprocess.TimeoutExpired:
        return (
            f"the SLURM controller did not answer `sinfo` within {SINFO_TIMEOUT_S} s. Fix: check that slurmctld "
            f"is up and reachable from here (`sinfo`, `scontrol ping`)"
        )
    except subprocess.CalledProcessError as e:
        reason = (e.stderr or e.stdout or "").strip().splitlines()
        return (
            f"`sinfo` failed ({reason[-1] if reason else f'exit code {e.returncode}'}): the SLURM controller is "
            f"not reachable from here. Fix: check `scontrol ping` and the SLURM configuration of this machine"
        )
    partition = config.cluster.get("partition")
    unknown = [p for p in str(partition or "").split(",") if p and p not in names]  # sbatch takes a list
    if unknown:
        return (
            f"cluster.partition={partition!r}: {', '.join(unknown)} does not exist on this cluster. Fix: cluster.partition=<one of "
            f"{', '.join(names)}>, or leave it unset for the default partition"
        )
    return None
