"""Every point of a sweep is composed and validated in the submitting process, before the first job is queued or run.

Hydra's sweeper only composes each point (a misspelt key fails there) and the values are checked inside each job
(launcher/validate.py): with ``cluster=slurm`` a bad value surfaced after the queue wait, buried in a submitit
traceback, and a plain ``rewardflow -m`` stopped at its first bad point after running the points before it. This Hydra
callback (registered in conf/hydra/default.yaml) runs at ``on_multirun_start``: it checks that no ``hydra.launcher.*``
value contradicts ``cluster.*`` (:func:`launcher.cluster.slurm_launcher.launcher_contradictions`) and that SLURM can
take jobs (:mod:`launcher.cluster.slurm_preflight`), enumerates the sweep's points as Hydra's basic sweeper does, composes each one
with Hydra's own config loader and runs the run's checks on it. Any failure ends the command (exit code 2) with every
bad point's overrides, the key and the fix; nothing is queued or run.

Checks of the submitting host only see what that host sees: files and local model folders are checked when they
exist here or are local paths, and the device checks (a GPU, ``model.allow_cpu``) run only where the ranks run
(``cluster=local_multi``); a ``cluster=slurm`` job checks its devices again on its node.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write

from launcher.run_dir_check import EXIT_CODE

log = logging.getLogger("rewardflow")

#: the sweeper whose points this module enumerates (another sweeper's points are only checked inside the jobs)
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def sweep_points(config: DictConfig) -> list[list[str]] | None:
    """The override list of every point the basic sweeper will launch (None for another sweeper)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if config.hydra.sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    args = params + list(config.hydra.overrides.task)
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    return [list(point) for point in BasicSweeper.split_arguments(parser.parse_overrides(args), None)[0]]


def point_error(config: DictConfig, point: list[str], on_this_host: bool, num: int = 0) -> str | None:
    """Why the sweep point ``point`` (job number ``num``) cannot run (None if it can): its composition or its checks
    failed, or its run dir holds another run (a re-run sweep with its overrides in another order)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from launcher.checkpoint.run_identity import check_own_run
    from launcher.validate import validate
    from rewardflow.errors import ConfigError

    try:
        cfg = GlobalHydra.instance().config_loader().load_sweep_config(config, point)
        with read_write(cfg), open_dict(cfg):  # the job's config, as Hydra hands it to the task
            cfg.hydra.job.num = num  # as Hydra's launchers number the jobs: the run dir is <sweep dir>/<num>
            run_dir = Path(cfg.hydra.sweep.dir) / str(cfg.hydra.sweep.subdir)
            del cfg["hydra"]
        validate(cfg, on_this_host=on_this_host)
        check_own_run(cfg, run_dir)
    except ConfigError as e:
        return str(e)
    except (HydraException, OmegaConfBaseException) as e:
        return f"cannot compose: {e}".strip()
    return None


def runs_on_this_host(config: DictConfig) -> bool:
    """Whether the sweep's ranks run on this machine (local launchers) rather than on cluster nodes."""
    return "slurm" not in str(config.hydra.launcher.get("_target_", "")).lower()


class SweepCheck(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from launcher.cluster.slurm_launcher import launcher_contradictions
        from launcher.cluster.slurm_preflight import slurm_problem

        if config.get("cluster", {}).get("name") == "slurm":  # cluster.* is the one place for SLURM values
            contradictions = launcher_contradictions(config)
            if contradictions:
                _fail("cluster=slurm: " + "\n  ".join(contradictions))
        problem = None if runs_on_this_host(config) else slurm_problem(config)
        if problem:
            _fail(f"cluster=slurm: {problem}")
        points = sweep_points(config)
        if not points:
            return
        on_this_host = runs_on_this_host(config)
        bad = []
        for n, point in enumerate(points):
            error = point_error(config, point, on_this_host, n)
            if error:
                bad.append(f"point {n} ({' '.join(point) or 'defaults'}):\n    " + error.replace("\n", "\n    "))
        if bad:
            _fail(f"{len(bad)} of {len(points)} sweep points cannot run, so none was started:\n  " + "\n  ".join(bad))


def _fail(message: str) -> None:
    print(f"rewardflow: config error: {message}", file=sys.stderr)
    sys.exit(EXIT_CODE)
