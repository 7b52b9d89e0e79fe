"""When a multi-rank job fails, say why: the error of rank 0 (the only one Hydra reports) plus the tails of the
other ranks' logs, where the rank that died first wrote its traceback."""

from __future__ import annotations

from pathlib import Path


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    keep = [l for l in text if "Warning" not in l and "warnings.warn" not in l]  # library warnings are noise here
    return "\n".join(keep[-lines:])


def other_ranks_report(lines: int = 25) -> str:
    """Log tails of the other tasks of this submitit job ("" outside a multi-task submitit job)."""
    from rewardflow.distributed import submitit_job_env

    env = submitit_job_env()
    if env is None or env.num_tasks <= 1:
        return ""
    from submitit.core.utils import JobPaths

    parts = []
    for rank in range(env.num_tasks):
        if rank == env.global_rank:
            continue
        paths = JobPaths(folder=env.paths.folder, job_id=env.job_id, task_id=rank)
        parts.append(f"--- rank {rank}: {paths.stderr}\n{tail(paths.stderr, lines)}")
    return "\n".join(parts)


class RankFailure(RuntimeError):
    """Rank 0's error, with the other ranks' log tails in the message."""
