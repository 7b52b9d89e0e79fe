"""Every point of a sweep is composed and validated in the submitting process, before the first job is queued or run.

Hydra's sweeper only composes each point (a misspelt key fails there) and the values are checked inside each job
(launcher/validate.py): with ``cluster=slurm`` a bad value surfaced after the queue wait, buried in a submitit
traceback, and a plain ``rewardflow -m`` stopped at its first bad point after running the points before it. This Hydra
callback (registered in conf/hydra/default.yaml) runs at ``on_multirun_start``: it checks that no ``hydra.launcher.*``
value contradicts ``cluster.*`` (:func:`launcher.cluster.slurm_launcher.launcher_contradictions`) and that SLURM can
take jobs (:mod:`launcher.cluster.slurm_preflight`), enumerates the sweep's points as Hydra's basic sweeper does, composes each one
with Hydra's own config loader and runs the run's checks on it. Any failure ends the command (exit code 2) with every
bad point's overrides, the key and the fix; nothing is queued or run.

A sweeper that samples its points as it goes (``hydra/sweeper=optuna``; docs/tuning.md) has no list of points
before the first trial: its search space is checked instead (:func:`search_space_points`), every choice of each
parameter and both ends (and the middle) of each interval or range, the other parameters at their first value. Such a
sweeper optimises what each run returns, ``trainer.objective`` (launcher/tracking/objective.py): every point must log
it, and its ``hydra.sweeper.direction`` must agree with ``trainer.objective_direction`` (:func:`direction_problem`).

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


#: how many values of a range a sweeper's search space check composes before it takes only its ends
RANGE_VALUES = 8


def uses_return_value(config: DictConfig) -> bool:
    """Whether the sweep's sweeper optimises what each run returns (any but Hydra's basic sweeper)."""
    return config.hydra.sweeper.get("_target_") != BASIC_SWEEPER


def search_space_points(config: DictConfig) -> list[list[str]]:
    """For a sweeper other than the basic one (Optuna, ...), which draws its points from a search space as it goes:
    points that together try every choice of each parameter of ``hydra.sweeper.params`` and of the command line,
    both ends and the middle of each ``interval(a,b)``, the ends of a long ``range(a,b)`` (Optuna's high end is
    inclusive), each with the other parameters at their first value. Fixed overrides are passed as the sweeper
    passes them, ``key=value``."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import IntervalSweep, RangeSweep, Transformer

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    args = params + list(config.hydra.overrides.task)
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    space: dict[str, list[str]] = {}  # a key given twice: the command line's wins, as in the sweeper
    for o in parser.parse_overrides(args):
        key = o.get_key_element()
        space.pop(key, None)
        if not o.is_sweep_override():
            space[key] = [o.get_value_element_as_str()]
            continue
        value = o.value()
        if isinstance(value, IntervalSweep):
            start, end = value.start, value.end
            both_int = isinstance(start, int) and isinstance(end, int)
            middle = (start + end) // 2 if both_int else (float(start) + float(end)) / 2
            values = [start, middle, end]
        elif isinstance(value, RangeSweep) and not value.shuffle:
            values = list(o.sweep_iterator(transformer=Transformer.encode))
            if len(values) > RANGE_VALUES:
                values = [values[0], values[-1]]
            if value.stop is not None and value.stop not in values:
                values.append(value.stop)
        else:
            values = list(o.sweep_iterator(transformer=Transformer.encode))
        space[key] = list(dict.fromkeys(str(v) for v in values)) or [""]
    base = {k: v[0] for k, v in space.items()}
    points = [[f"{k}={v}" for k, v in base.items()]]
    for key, values in space.items():
        for other in values[1:]:
            points.append([f"{k}={other if k == key else v}" for k, v in base.items()])
    return points


def _direction_names(direction: Any) -> list[str]:
    from omegaconf import ListConfig

    items = list(direction) if isinstance(direction, (list, tuple, ListConfig)) else [direction]
    return [str(getattr(d, "name", d)) for d in items]


def direction_problem(config: DictConfig) -> str | None:
    """Why the sweeper's ``hydra.sweeper.direction`` contradicts ``trainer.objective_direction`` (None if it does
    not). A sweeper direction not set explicitly (the Optuna plugin's default, ``minimize``) is set to the objective's
    instead, so that a reward is maximized unless told otherwise."""
    from launcher.tracking.objective import DIRECTION_KEY, KEY

    sweeper = config.hydra.sweeper
    if "direction" not in sweeper:
        return None
    wanted = str(getattr(config.trainer.objective_direction, "value", config.trainer.objective_direction))
    names = _direction_names(sweeper.direction)
    if len(names) != 1:
        return (
            f"hydra.sweeper.direction={names} asks for {len(names)} objectives, and a run returns one, "
            f"{KEY}. Fix: hydra.sweeper.direction={wanted}"
        )
    if names[0] == wanted:
        return None
    given = [str(o) for o in config.hydra.overrides.hydra]
    explicit = any(o.lstrip("+").startswith("hydra.sweeper.direction=") for o in given)
    if not explicit and names[0] == "minimize":  # the Optuna plugin's default
        with read_write(config.hydra), open_dict(config.hydra):
            sweeper.direction = wanted
        log.info("hydra.sweeper.direction=%s (from %s)", wanted, DIRECTION_KEY)
        return None
    return (
        f"hydra.sweeper.direction={names[0]} contradicts {DIRECTION_KEY}={wanted}. Fix: give both the same "
        f"direction (hydra.sweeper.direction={wanted}, or {DIRECTION_KEY}={names[0]})"
    )


def point_error(
    config: DictConfig,
    point: list[str],
    on_this_host: bool,
    num: int = 0,
    own_run: bool = True,
    objective: bool = False,
) -> str | None:
    """Why the sweep point ``point`` (job number ``num``) cannot run (None if it can): its composition or its checks
    failed, its run dir holds another run (a re-run sweep with its overrides in another order; ``own_run``), or it
    would never log ``trainer.objective`` (``objective``: the sweeper optimises it)."""
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
        if own_run:
            check_own_run(cfg, run_dir)
        if objective:
            from launcher.tracking.objective import objective_problem

            problem = objective_problem(cfg)
            if problem:
                return problem
    except ConfigError as e:
        return str(e)
    except (HydraException, OmegaConfBaseException) as e:
        return f"cannot compose: {e}".strip()
    return None


def runs_on_this_host(config: DictConfig) -> bool:
    """Whether the sweep's ranks run on this machine (local launchers) rather than on cluster nodes."""
    return "slurm" not in str(config.hydra.launcher.get("_target_", "")).lower()


def runs_as_local_points(config: DictConfig) -> bool:
    """Whether the sweep's points run through ``hydra/launcher=rewardflow_local`` (launcher/cluster/local_sweep.py),
    i.e. from its fork server."""
    return str(config.hydra.launcher.get("_target_", "")).endswith("LocalSweepLauncher")


class SweepCheck(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        early = runs_as_local_points(config)
        if early:  # the points' fork server imports torch while the points below are checked
            from launcher.cluster.local_sweep import family_modules
            from launcher.cluster.point_process import start_early, stop_server

            start_early(list(family_modules(config)))
        try:
            self._check(config)
        except BaseException:
            if early:
                stop_server()
            raise

    def _check(self, config: DictConfig) -> None:
        from launcher.cluster.slurm_launcher import launcher_contradictions
        from launcher.cluster.slurm_preflight import slurm_problem

        if config.get("cluster", {}).get("name") == "slurm":  # cluster.* is the one place for SLURM values
            contradictions = launcher_contradictions(config)
            if contradictions:
                _fail("cluster=slurm: " + "\n  ".join(contradictions))
        problem = None if runs_on_this_host(config) else slurm_problem(config)
        if problem:
            _fail(f"cluster=slurm: {problem}")
        on_this_host = runs_on_this_host(config)
        if uses_return_value(config):
            self._check_search_space(config, on_this_host)
            return
        points = sweep_points(config)
        if not points:
            return
        bad = []
        for n, point in enumerate(points):
            error = point_error(config, point, on_this_host, n)
            if error:
                bad.append(_point_line(f"point {n}", point, error))
        if bad:
            _fail(f"{len(bad)} of {len(points)} sweep points cannot run, so none was started:\n  " + "\n  ".join(bad))

    @staticmethod
    def _check_search_space(config: DictConfig, on_this_host: bool) -> None:
        sweeper = str(config.hydra.sweeper.get("_target_", "")).rsplit(".", 1)[-1]
        problem = direction_problem(config)
        if problem:
            _fail(f"{sweeper}: {problem}")
        problem = _objective_problem_of(config)
        if problem:  # the same for every point: once
            _fail(f"{sweeper}: {problem}")
        points = search_space_points(config)
        bad = []
        for point in points:
            error = point_error(config, point, on_this_host, own_run=False, objective=True)
            if error:
                bad.append(_point_line("values", point, error))
        if bad:
            _fail(
                f"{sweeper}: {len(bad)} of the {len(points)} points of the search space checked cannot run, so no "
                f"trial was started:\n  " + "\n  ".join(bad)
            )


def _objective_problem_of(config: DictConfig) -> str | None:
    """:func:`launcher.tracking.objective.objective_problem` of the sweep's config without its search space."""
    from omegaconf import OmegaConf

    from launcher.tracking.objective import objective_problem

    job = OmegaConf.masked_copy(config, [str(k) for k in config if k != "hydra"])
    try:
        return objective_problem(job)
    except Exception:  # noqa: BLE001 - a config that does not resolve fails its points' checks, with the reason
        return None


def _point_line(what: str, point: list[str], error: str) -> str:
    return f"{what} ({' '.join(point) or 'defaults'}):\n    " + error.replace("\n", "\n    ")


def _fail(message: str) -> None:
    print(f"rewardflow: config error: {message}", file=sys.stderr)
    sys.exit(EXIT_CODE)
