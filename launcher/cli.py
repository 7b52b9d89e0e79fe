"""The ``rewardflow`` command (also ``python -m launcher``): Hydra's entry point.

Bad configs end with a one-paragraph message naming the key and the fix (exit code 2), not a traceback.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

import hydra
from omegaconf import DictConfig, OmegaConf

from launcher import installation, override_guard
from launcher.cfg_print import hydra_cfg_resolved_in_context
from launcher.cli_help import completion_filter
from launcher.config import register_configs

installation.guard()  # before register_configs(), which may import methods/models/rewards
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
register_configs()
log = logging.getLogger("rewardflow")


def _run_info(cfg: DictConfig):
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from launcher.tracking.run_names import readable_name
    from launcher.train.trainer import RunInfo

    hc = HydraConfig.get()
    task = [str(o) for o in OmegaConf.to_container(hc.overrides.task, resolve=False) or []]  # "${...}" as typed
    overrides = [o for o in task if not o.startswith(("hydra.", "logger."))]
    multirun = hc.mode == RunMode.MULTIRUN
    group = f"sweep-{Path(hc.sweep.dir).name}" if multirun else None
    name = readable_name(overrides)  # "jagg seed=0 lr=0.0003" (launcher/tracking/run_names.py)
    return RunInfo(
        run_dir=Path(hc.runtime.output_dir),
        run_name=name,
        group=group,
        tags=["sweep"] if multirun else [],
        overrides=task,
    )


def run(cfg: DictConfig, info=None) -> float:
    """Build and train one run from a composed config (used by the CLI and by tests)."""
    from launcher.checkpoint import preemption

    # before the slow imports: see preemption.py; a local run checkpoints on SIGTERM/SIGUSR1/SIGUSR2/SIGINT too
    preemption.install(float(cfg.cluster.get("signal_delay_s", 0)), local=cfg.cluster.name == "local" and info is None)
    if info is None:
        from launcher.cluster.device_check import stray_process_group

        stray = stray_process_group(str(cfg.cluster.name))
        if stray:  # before any rendezvous: a message in seconds, not a 600 s wait
            _report(f"config error: {stray}", 2, remove_new_folder=True)
    if info is None and cfg.cluster.name == "local":
        _lock_run_dir_early()
    from launcher.train.trainer import Trainer, TrainingAborted

    _quiet_libraries()
    logging.raiseExceptions = False  # a full disk must not turn every later log line into a printed traceback
    try:
        trainer = Trainer(cfg, info or _run_info(cfg))
    except Exception as e:  # noqa: BLE001 - Hydra wraps errors raised while instantiating components
        cause = config_error_in(e)
        if cause is None:
            raise
        _report(f"config error: {cause}", 2, remove_new_folder=info is None)
    try:
        return trainer.fit()
    except TrainingAborted as e:
        _report(f"training aborted: {e}", 3)
    except preemption.StoppedBySignal as e:
        _report(str(e), 128 + e.signum)
    except Exception as e:
        import time
        import traceback

        disk = disk_error_in(e)
        if disk is not None:  # a full disk or a read-only run folder: one line, not a chain of tracebacks
            _disk_full(disk, trainer.info.run_dir)

        from launcher.cluster.job_logs import RankFailure, other_ranks_report

        # Hydra keeps a task's exception inside its JobReturn without printing it: every rank writes its own
        # traceback to its log first, so the rank that failed first has the cause in its log.
        print(f"rank {trainer.world.rank} failed:", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        if trainer.world.world_size > 1 and trainer.world.is_main:
            time.sleep(2.0)  # let the other ranks finish writing theirs
        report = other_ranks_report() if trainer.world.is_main else ""
        if report:  # Hydra's launcher returns rank 0's outcome only: carry the other ranks' evidence with it
            raise RankFailure(f"{type(e).__name__}: {e}\nlogs of the other ranks of this job:\n{report}") from e
        raise
    except BaseException as e:  # DCP's CheckpointException is a BaseException, not an Exception
        disk = None if isinstance(e, (KeyboardInterrupt, SystemExit)) else disk_error_in(e)
        if disk is None:
            raise
        _disk_full(disk, trainer.info.run_dir)


def _disk_full(disk: OSError, run_dir: Path) -> NoReturn:
    print(
        f"rewardflow: cannot write {disk.filename or f'in {run_dir}'}: {disk.strerror} (errno {disk.errno}). "
        f"Fix: free space or make the run folder writable, then run the same command to resume from the run's last "
        f"checkpoint",
        file=sys.stderr,
    )
    sys.exit(1)


def _lock_run_dir_early() -> None:
    """A single-process run (this process is rank 0) locks its run dir before the slow imports, so a second start in
    the same run dir fails within seconds; the trainer adopts the lock (launcher/checkpoint/run_lock.py)."""
    from hydra.core.hydra_config import HydraConfig

    from launcher.checkpoint.run_lock import RunDirBusy, lock_before_start

    try:
        lock_before_start(HydraConfig.get().runtime.output_dir)
    except RunDirBusy as e:
        _report(f"config error: {e}", 2)


def _report(message: str, exit_code: int, remove_new_folder: bool = False) -> NoReturn:
    """End the run with a one-paragraph message on stderr, kept in the run's log file too; ``remove_new_folder``: a
    config error of a run whose folder this command created removes it instead (launcher/run_check.py), as the
    errors found before Hydra creates it leave none."""
    from launcher.run_check import remove_new_run_folder
    from launcher.tracking.log_files import log_to_files

    print(f"rewardflow: {message}", file=sys.stderr)
    if not (remove_new_folder and remove_new_run_folder()):
        log_to_files(log, logging.ERROR, message)
    sys.exit(exit_code)


#: the errors of a file system that cannot take more: full, over quota, read-only, not permitted
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def disk_error_in(error: BaseException | None) -> OSError | None:
    """The out-of-space / read-only :class:`OSError` in ``error``'s cause or context chain (a failure while
    writing, and the failures it set off in the clean-up that followed), or None."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _DISK_ERRNOS:
            return error
        for failure in (getattr(error, "failures", None) or {}).values():  # DCP: {rank: (exception, traceback)}
            found = disk_error_in(failure[0] if isinstance(failure, tuple) else failure)
            if found is not None:
                return found
        error = error.__cause__ or error.__context__
    return None


def config_error_in(error: BaseException | None):
    """The :class:`ConfigError` in ``error``'s cause chain (Hydra's ``instantiate`` wraps what a component's
    constructor raises, e.g. a model that cannot be loaded offline), or None."""
    from omegaconf.errors import GrammarParseError, InterpolationResolutionError

    from rewardflow.errors import ConfigError

    while error is not None:
        if isinstance(error, ConfigError):
            return error
        if isinstance(error, (InterpolationResolutionError, GrammarParseError)):  # e.g. trainer.steps=${oops}
            key = getattr(error, "full_key", "") or "an override"
            return ConfigError(
                f"{key}: {str(error).splitlines()[0]}. Fix: an interpolation ${{...}} must name an existing key "
                f"(e.g. ${{trainer.seed}}); write \\${{...}} for a literal ${{...}}"
            )
        error = error.__cause__
    return None


def _quiet_libraries() -> None:
    try:
        import diffusers
        import transformers

        diffusers.utils.logging.disable_progress_bar()
        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
        diffusers.utils.logging.set_verbosity_error()
    except Exception:  # pragma: no cover - cosmetic only
        pass


@hydra.main(version_base="1.3", config_path=installation.config_path(), config_name="train")
def _hydra_main(cfg: DictConfig) -> float:
    return run(cfg)


def main() -> None:
    """The entry point. ``--plan`` (or ``plan=true``) prints the per-rank memory plan of every run of the command
    line and exits before Hydra would build or submit anything (docs/memory.md#the-plan-before-submission)."""
    args = sys.argv[1:]
    refused = override_guard.refusal(args) or override_guard.grammar_problem(args)
    if refused:  # before Hydra instantiates anything (its callbacks come first)
        print(f"rewardflow: config error: {refused}", file=sys.stderr)
        sys.exit(2)
    if "--plan" in args or "plan=true" in args or "+plan=true" in args:
        from launcher.plan.cli import main as plan_main

        overrides = [a for a in args if a not in ("--plan", "plan=true", "+plan=true", "-m", "--multirun")]
        sys.exit(plan_main(overrides))
    with completion_filter(args), hydra_cfg_resolved_in_context(args):
        _hydra_main()
    local_sweep = sys.modules.get("launcher.cluster.local_sweep")
    if local_sweep is not None and local_sweep.ran_points:
        local_sweep.exit_without_teardown()


if __name__ == "__main__":
    main()
