"""A single run's config errors leave no run folder behind, and the common ones come in about a second.

Hydra creates the run folder (``.hydra/``, ``rewardflow.log``) before the task starts, and the run's checks used to
run in the task, after torch and diffusers were imported: ``rewardflow trainer.steps=0`` took 5-50 s and left an
``outputs/train/runs/<ts>/`` folder holding nothing but the error (issue 29, item 4). This Hydra callback (registered
in conf/hydra/default.yaml) runs at ``on_run_start``, after composition and before Hydra makes the folder:

- it runs :func:`launcher.validate.precheck`, the checks that need no component code (unknown and missing keys, the
  trainer's, optimizer's and cluster's keys, the environment), which import no torch; a failure ends the command
  there (exit code 2) and nothing is created;
- it notes whether the run folder is new. The checks that need a component's code (its ``check`` hook, the devices)
  still run in the trainer, after the folder exists; when one fails, the CLI calls :func:`remove_new_run_folder`,
  which removes the folder (and the parents this run created) only if this run created it, so a resumed run's
  folder is never touched (docs/configuration.md#validation).

Sweeps are checked point by point before anything runs by launcher/cluster/sweep_check.py.
"""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write

from launcher.run_dir_check import EXIT_CODE

#: (run folder, the highest folder this run creates) when the run folder did not exist at the start, else None
_new_folder: tuple[Path, Path] | None = None


def note_run_folder(run_dir: str) -> None:
    """Record whether ``run_dir`` is new (see :func:`remove_new_run_folder`)."""
    global _new_folder
    path = Path(run_dir).absolute()
    if path.exists():
        _new_folder = None
        return
    top = path
    while not top.parent.exists():
        top = top.parent
    _new_folder = (path, top)


def remove_new_run_folder() -> bool:
    """Remove the run folder if this run created it (at :func:`note_run_folder`), and the parents it created that
    are now empty (``outputs/``, ``outputs/train/runs/`` of a first run); whether it did. A parent that another run
    wrote into meanwhile is kept."""
    global _new_folder
    if _new_folder is None:
        return False
    path, top = _new_folder
    _new_folder = None
    shutil.rmtree(path, ignore_errors=True)
    while path != top:
        path = path.parent
        try:
            path.rmdir()  # only when empty
        except OSError:
            break
    return True


class RunCheck(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from launcher.validate import precheck
        from rewardflow.errors import ConfigError

        note_run_folder(str(config.hydra.run.dir))  # the same ${now:} value Hydra uses: the resolver caches it
        job = copy.deepcopy(config)  # the task's config, as Hydra hands it over: without the hydra node
        with read_write(job), open_dict(job):
            del job["hydra"]
        try:
            precheck(job)
        except ConfigError as e:
            print(f"rewardflow: config error: {e}", file=sys.stderr)
            sys.exit(EXIT_CODE)
        except Exception:  # noqa: BLE001 - e.g. an unresolvable ${...}: the task reports it, with its fix, in one line
            return  # (Hydra would print a callback's exception as a warning beside that line)
