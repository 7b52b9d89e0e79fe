"""The record of a ``cluster=slurm`` sweep's jobs: ``<sweep dir>/slurm_jobs.json``, written by the SLURM launcher
(launcher/cluster/slurm_launcher.py) as soon as a batch is queued, blocking (``cluster.wait=true``) or not, and read
by ``rewardflow-status`` (launcher/cluster/sweep_status.py), which follows and cancels the jobs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

JOBS_FILE = "slurm_jobs.json"


def record_jobs(sweep_dir: Path, jobs: Sequence[Any], overrides: Sequence[Sequence[str]], nums: Sequence[int]) -> None:
    """Add the submitted jobs to ``<sweep dir>/slurm_jobs.json``: per job number its SLURM job id, overrides, run dir
    and log files."""
    path = sweep_dir / JOBS_FILE
    known = json.loads(path.read_text()) if path.exists() else []
    for job, job_overrides, num in zip(jobs, overrides, nums):
        known.append(
            {
                "num": int(num),
                "job_id": job.job_id,
                "overrides": list(job_overrides),
                "run_dir": str(sweep_dir / str(num)),
                "stdout": str(job.paths.stdout),
                "stderr": str(job.paths.stderr),
            }
        )
    path.write_text(json.dumps(known, indent=1) + "\n")
