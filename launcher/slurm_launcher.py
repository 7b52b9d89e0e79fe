"""``cluster=slurm``'s Hydra launcher: hydra-submitit-launcher's, which can also submit and return (``cluster.wait``).

Upstream's launcher submits the sweep as one job array and then waits for every job's result (Hydra's launcher
design), so the submitting terminal had to stay open for days. With ``cluster.wait=false`` this subclass lets it
submit exactly as before and hands Hydra a placeholder result per job instead of waiting, then prints the job ids,
the sweep dir and how to follow it. Either way it records the jobs in ``<sweep dir>/slurm_jobs.json``, which
``rewardflow-status <sweep dir>`` reads (launcher/sweep_status.py).
"""
from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Callable, Iterator, Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher

log = logging.getLogger("rewardflow")

JOBS_FILE = "slurm_jobs.json"


@contextlib.contextmanager
def _submitted_jobs(on_submit: Callable[[list], None], wait: bool) -> Iterator[None]:
    """While upstream's ``launch`` runs: call ``on_submit(jobs)`` as soon as its job array is submitted, and with
    ``wait=False`` answer its wait for each job's result at once with a placeholder."""
    import submitit

    map_array, results = submitit.AutoExecutor.map_array, submitit.Job.results

    def map_array_and_report(executor, *args, **kwargs):
        jobs = map_array(executor, *args, **kwargs)
        on_submit(jobs)
        return jobs

    def placeholder_result(job):
        return [JobReturn(status=JobStatus.COMPLETED, _return_value=None)]

    submitit.AutoExecutor.map_array = map_array_and_report
    if not wait:
        submitit.Job.results = placeholder_result
    try:
        yield
    finally:
        submitit.AutoExecutor.map_array, submitit.Job.results = map_array, results


class SlurmLauncher(SubmititSlurmLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        wait = bool(self.config.cluster.get("wait", True))
        sweep_dir = Path(str(self.config.hydra.sweep.dir))

        def on_submit(jobs: list) -> None:
            record_jobs(sweep_dir, jobs, job_overrides, initial_job_idx)
            if not wait:
                print(f"rewardflow: submitted {len(jobs)} SLURM job(s): {', '.join(j.job_id for j in jobs)}\n"
                      f"  sweep dir: {sweep_dir}\n"
                      f"  follow it: rewardflow-status {sweep_dir}   (also squeue --me; submitit's logs in "
                      f"{sweep_dir}/.submitit/)", flush=True)

        with _submitted_jobs(on_submit, wait):
            return super().launch(job_overrides, initial_job_idx)


def record_jobs(sweep_dir: Path, jobs: list, job_overrides: Sequence[Sequence[str]], first: int) -> None:
    """Add the submitted jobs to ``<sweep dir>/slurm_jobs.json``: per job number its SLURM job id, overrides, run dir
    and log files."""
    path = sweep_dir / JOBS_FILE
    known = json.loads(path.read_text()) if path.exists() else []
    for k, (job, overrides) in enumerate(zip(jobs, job_overrides)):
        known.append({"num": first + k, "job_id": job.job_id, "overrides": list(overrides),
                      "run_dir": str(sweep_dir / str(first + k)), "stdout": str(job.paths.stdout),
                      "stderr": str(job.paths.stderr)})
    path.write_text(json.dumps(known, indent=1) + "\n")
