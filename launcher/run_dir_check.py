"""A run or sweep folder that cannot be written is reported in one line before anything is created or built.

Hydra creates the run folder and opens its log file before the task starts, so an unwritable location (a read-only
file system, a missing permission, a file where a folder should be) used to end in a Hydra traceback. This Hydra
callback (registered in conf/hydra/default.yaml) tries the location first: it creates and removes a probe folder
in the run folder, or in its nearest existing parent, so a failed check leaves nothing behind.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

EXIT_CODE = 2  # the CLI's exit code for configuration errors


def unwritable_reason(folder: str | os.PathLike) -> str | None:
    """Why ``folder`` cannot be created and written (None if it can)."""
    path = Path(folder).expanduser().absolute()
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        probe = tempfile.mkdtemp(prefix=".rewardflow-write-test-", dir=existing)
        os.rmdir(probe)
    except OSError as e:
        return f"{existing}: {e.strerror or e}"
    return None


def check_writable(folder: str, key: str) -> None:
    """Exit with a message naming ``key`` when ``folder`` cannot be written."""
    reason = unwritable_reason(folder)
    if reason is None:
        return
    print(
        f"rewardflow: cannot write the {'sweep' if 'sweep' in key else 'run'} folder {folder} ({reason}). "
        f"Fix: output_root=<a writable folder> (runs go to <output_root>/train/...), or {key}=<a writable "
        f"folder>",
        file=sys.stderr,
    )
    sys.exit(EXIT_CODE)


class RunDirCheck(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_writable(str(config.hydra.run.dir), "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_writable(str(config.hydra.sweep.dir), "hydra.sweep.dir")
