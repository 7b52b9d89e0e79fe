"""``cluster=slurm`` sweeps record their jobs, and with ``cluster.wait=false`` the command returns once they are queued.

hydra-submitit-launcher submits a sweep as one job array and then waits for every job's result (Hydra's launcher
design), so the submitting terminal had to stay open for days. Hydra only runs launchers from its ``hydra_plugins``
namespace, so rather than a launcher subclass (a plugin package to install) this Hydra callback (registered in
conf/hydra/default.yaml) acts in the submitting process around upstream's ``launch``: as soon as the array is
submitted it records the jobs in ``<sweep dir>/slurm_jobs.json`` (read by ``rewardflow-status``,
launcher/cluster/sweep_status.py), and with ``cluster.wait=false`` it answers upstream's wait for each result at once with a
placeholder and prints the job ids, the sweep dir and how to follow it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

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


class SlurmJobs(Callback):
    def __init__(self) -> None:
        self._restore: Callable[[], None] | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if "slurm" not in str(config.hydra.launcher.get("_target_", "")).lower():
            return
        import submitit

        wait = bool(config.cluster.get("wait", True))
        sweep_dir = Path(str(config.hydra.sweep.dir))
        map_array, results = submitit.AutoExecutor.map_array, submitit.Job.results

        # upstream calls executor.map_array(launcher, overrides, dir keys, job numbers, ...) once per batch
        def map_array_and_record(executor, fn, *iterables):
            jobs = map_array(executor, fn, *iterables)
            record_jobs(sweep_dir, jobs, iterables[0], iterables[2])
            if not wait:
                print(
                    f"rewardflow: submitted {len(jobs)} SLURM job(s): {', '.join(j.job_id for j in jobs)}\n"
                    f"  sweep dir: {sweep_dir}\n"
                    f"  follow it: rewardflow-status {sweep_dir}   (also squeue --me; submitit's logs in "
                    f"{sweep_dir}/.submitit/)",
                    flush=True,
                )
            return jobs

        def placeholder_result(job):
            return [JobReturn(status=JobStatus.COMPLETED, _return_value=None)]

        submitit.AutoExecutor.map_array = map_array_and_record
        if not wait:
            submitit.Job.results = placeholder_result

        def restore() -> None:
            submitit.AutoExecutor.map_array, submitit.Job.results = map_array, results

        self._restore = restore

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None
