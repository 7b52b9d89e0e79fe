"""The launcher of ``cluster=slurm`` sweeps: hydra-submitit-launcher's, recording the jobs and, with
``cluster.wait=false``, returning once they are queued.

hydra-submitit-launcher submits a sweep as one job array and then waits for every job's result (Hydra's launcher
design), so the submitting terminal had to stay open for days, and nothing outside could tell which job ran which
point. This launcher (selected by conf/cluster/slurm.yaml as ``hydra/launcher=rewardflow_slurm``; the class Hydra
instantiates is declared in its ``hydra_plugins`` namespace, hydra_plugins/rewardflow_launchers/slurm_launcher.py)
submits as upstream does, then:

- records the jobs in ``<sweep dir>/slurm_jobs.json`` (launcher/cluster/slurm_jobs.py) as soon as they are queued,
  for ``rewardflow-status`` (which also cancels them: ``rewardflow-status --cancel``);
- ``cluster.wait=true`` (the default): waits for the results as upstream does (a failed job fails the sweep);
- ``cluster.wait=false``: prints the job ids, the sweep dir and how to follow it, and returns a completed
  ``JobReturn`` without a value per job, so Hydra's sweeper ends the sweep cleanly and the command exits 0 while the
  jobs run (the sweep banner then points to ``rewardflow-status``).

Its config, :class:`RewardflowSlurmConf`, takes every value from ``cluster.*`` by interpolation: ``cluster.*`` is the
one place rewardflow reads SLURM values, and :func:`launcher_contradictions` reports a ``hydra.launcher.*`` value
that differs from what ``cluster.*`` gives (launcher/cluster/sweep_check.py runs it before anything is queued;
docs/clusters.md#slurm).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import II, DictConfig, OmegaConf, open_dict, read_write

from launcher.cluster.slurm_jobs import record_jobs

#: the class Hydra instantiates (Hydra only instantiates launchers from its ``hydra_plugins`` namespace)
SLURM_SWEEP_LAUNCHER = "hydra_plugins.rewardflow_launchers.slurm_launcher.SlurmSweepLauncher"
#: upstream's sbatch flags that have no ``cluster.*`` key of their own: ``cluster.additional_parameters`` takes them
SBATCH_FLAGS = ("comment", "exclude", "gres", "cpus_per_gpu", "gpus_per_task", "mem_per_gpu", "mem_per_cpu")


@dataclass
class RewardflowSlurmConf(SlurmQueueConf):
    """``hydra/launcher=rewardflow_slurm``: upstream's SLURM launcher config with every value taken from
    ``cluster.*`` (launcher/cluster/cluster_config.py documents the keys). The other upstream keys keep upstream's
    defaults; their sbatch flags (:data:`SBATCH_FLAGS`) go through ``cluster.additional_parameters``."""

    _target_: str = SLURM_SWEEP_LAUNCHER
    nodes: int = II("cluster.nodes")
    tasks_per_node: int = II("cluster.tasks_per_node")
    gpus_per_node: Optional[int] = II("rf_null_if_zero:${cluster.gpus_per_node}")  # 0: no --gpus-per-node flag
    cpus_per_task: Optional[int] = II("cluster.cpus_per_task")
    mem_gb: Optional[int] = II("cluster.mem_gb")
    partition: Optional[str] = II("cluster.partition")
    account: Optional[str] = II("cluster.account")
    qos: Optional[str] = II("cluster.qos")
    constraint: Optional[str] = II("cluster.constraint")
    timeout_min: int = II("cluster.timeout_min")
    signal_delay_s: int = II("cluster.signal_delay_s")
    max_num_timeout: int = II("cluster.max_num_timeout")
    array_parallelism: int = II("cluster.array_parallelism")
    additional_parameters: dict[str, Any] = II("cluster.additional_parameters")
    setup: Optional[list[str]] = II("cluster.setup")
    wait: bool = II("cluster.wait")


class SlurmSweepLauncher(SlurmLauncher):
    def __init__(self, wait: bool = True, **params: Any) -> None:
        super().__init__(**params)  # upstream hands every other param to submitit's executor
        self.wait = bool(wait)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        jobs = self.submit(job_overrides, initial_job_idx)
        nums = [initial_job_idx + i for i in range(len(jobs))]
        record_jobs(sweep_dir, jobs, job_overrides, nums)
        if self.wait:
            return [j.results()[0] for j in jobs]
        print(
            f"rewardflow: submitted {len(jobs)} SLURM job(s): {', '.join(j.job_id for j in jobs)}\n"
            f"  sweep dir: {sweep_dir}\n"
            f"  follow it: rewardflow-status {sweep_dir}   (also squeue --me; submitit's logs in "
            f"{sweep_dir}/.submitit/)",
            flush=True,
        )
        return [  # the jobs run on: their outcome is rewardflow-status's to tell
            JobReturn(
                overrides=list(overrides),
                working_dir=str(sweep_dir / str(num)),
                task_name=str(self.config.hydra.job.name),
                status=JobStatus.COMPLETED,
                _return_value=None,
            )
            for overrides, num in zip(job_overrides, nums)
        ]

    def submit(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
        """Submit the batch as one job array and return its ``submitit.Job``s: upstream's ``launch``
        (hydra-submitit-launcher 1.2) up to the wait for the results."""
        import logging

        import submitit

        assert self.config is not None
        assert len(job_overrides) > 0
        init_keys = {"max_num_timeout", "submitit_folder"}
        executor = submitit.AutoExecutor(
            cluster=self._EXECUTOR,
            folder=self.params["submitit_folder"],
            **{f"{self._EXECUTOR}_{k}": v for k, v in self.params.items() if k == "max_num_timeout"},
        )
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{k if k in base else f"{self._EXECUTOR}_{k}": v for k, v in self.params.items() if k not in init_keys}
        )
        log = logging.getLogger("hydra_plugins.hydra_submitit_launcher.submitit_launcher")
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {self.config.hydra.sweep.dir}")
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        job_params = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        return list(executor.map_array(self, *zip(*job_params)))


# ------------------------------------------------------------------------------------------- one source of truth
def _expressions() -> dict[str, Any]:
    """Each launcher key's value in :class:`RewardflowSlurmConf` (an interpolation, or upstream's fixed default)."""
    out = {}
    for f in dataclasses.fields(RewardflowSlurmConf):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _source(expression: Any) -> str | None:
    """The key an interpolation reads (``cluster.gpus_per_node`` of ``${rf_null_if_zero:${cluster.gpus_per_node}}``)."""
    found = re.findall(r"\$\{([A-Za-z_][\w.]*)\}", str(expression)) if isinstance(expression, str) else []
    return found[-1] if found else None


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()  # as typed on the command line
    if isinstance(value, (dict, list)):
        return str(value).replace(" ", "")
    return str(value)


def launcher_contradictions(config: DictConfig) -> list[str]:
    """Why the composed ``hydra.launcher`` is not the one ``cluster.*`` gives (empty if it is): a ``hydra.launcher.*``
    value (an override, a config file) that differs from its ``cluster.*`` source, or another launcher selected. Each
    message names both keys and the fix. Nothing is imported beyond OmegaConf; the resolvers of the computed
    ``cluster.*`` defaults run (the plan, torch-free)."""
    launcher = config.hydra.launcher
    target = launcher.get("_target_")
    if target != SLURM_SWEEP_LAUNCHER:
        return [
            f"hydra.launcher._target_={target} is not rewardflow's SLURM launcher: cluster=slurm selects "
            f"hydra/launcher=rewardflow_slurm, which reads its values from cluster.*. Fix: drop the hydra/launcher "
            f"override and set cluster.* instead"
        ]
    expressions, keys = _expressions(), set(launcher.keys())  # (``key in launcher`` would resolve the value)
    changed = {k for k, e in expressions.items() if k in keys and launcher._get_node(k)._value() != e}
    unknown = sorted(keys - set(expressions))
    if not changed and not unknown:
        return []
    expected = copy.deepcopy(config)
    with read_write(expected), open_dict(expected):
        for key in changed:
            expected.hydra.launcher[key] = expressions[key]
    errors = []
    for key in sorted(changed):
        value, wanted = OmegaConf.select(config, f"hydra.launcher.{key}"), expected.hydra.launcher[key]
        value, wanted = (
            OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for v in (value, wanted)
        )
        if value == wanted:
            continue
        source = _source(expressions[key])
        if source is not None:
            errors.append(
                f"hydra.launcher.{key}={_show(value)} contradicts {source}={_show(OmegaConf.select(config, source))}: "
                f"set {source} (the one place rewardflow reads SLURM values)"
            )
        elif key in SBATCH_FLAGS:
            errors.append(
                f"hydra.launcher.{key}={_show(value)}: rewardflow reads SLURM values from cluster.* only. Fix: "
                f"+cluster.additional_parameters.{key}={_show(value)} (any sbatch flag goes there)"
            )
        else:
            errors.append(
                f"hydra.launcher.{key}={_show(value)}: rewardflow sets it ({_show(wanted)}) and reads SLURM values "
                f"from cluster.* only. Fix: drop the override (an sbatch flag: +cluster.additional_parameters.<flag>=<value>)"
            )
    for key in unknown:
        errors.append(
            f"hydra.launcher.{key}: not a key of the SLURM launcher; rewardflow reads SLURM values from cluster.* "
            f"only. Fix: +cluster.additional_parameters.{key}=<value> for an sbatch flag"
        )
    return errors
