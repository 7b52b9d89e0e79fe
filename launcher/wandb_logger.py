"""Weights & Biases backend: run config = the full resolved Hydra config, group/tags from method, model, reward and
the sweep, and the compute axes ``time/wallclock_s`` / ``time/gpu_hours`` registered with ``define_metric`` so
dashboards can plot any metric against them. Offline unless an API key is present (``logger.mode=auto``)."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from launcher.wandb_logger_config import WandbLoggerConfig, WandbMode
from rewardflow.errors import ConfigErrors

log = logging.getLogger(__name__)

COMPUTE_AXES = ("time/wallclock_s", "time/gpu_hours")
MAX_TAG_LENGTH = 64   # W&B rejects longer tags when the run starts


def resolve_mode(mode: str) -> str:
    if mode not in tuple(WandbMode):
        raise ValueError(f"logger.mode must be one of {', '.join(WandbMode)} (got {mode!r})")
    if mode != WandbMode.auto:
        return str(mode)
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


class WandbLogger:
    """Thin wrapper over a ``wandb`` run, built from its typed config (:class:`WandbLoggerConfig`) and the run's
    names (the trainer picks ``group``, ``tags`` and ``run_name`` from the config or the sweep). ``run_id`` resumes
    an existing run (same id, no duplicated steps)."""

    def __init__(self, cfg: WandbLoggerConfig, run_dir: str | Path, run_config: dict[str, Any],
                 group: str | None = None, tags: list[str] | None = None, run_name: str | None = None,
                 run_id: str | None = None):
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.mode = resolve_mode(cfg.mode)
        self.run_dir = Path(run_dir)
        self.log_images_enabled = cfg.log_images
        self._wandb = wandb
        self.run = wandb.init(project=cfg.project, entity=cfg.entity, dir=str(run_dir), mode=self.mode,
                              config=run_config, group=group, tags=list(tags or []), name=run_name, id=run_id,
                              resume="allow" if run_id else None, reinit="finish_previous")
        self.run.define_metric("step")
        for axis in COMPUTE_AXES:           # compute axes: selectable as x-axis, summarised by their max
            self.run.define_metric(axis, step_metric="step", summary="max")
        self.run.define_metric("*", step_metric="step")
        where = getattr(self.run, "url", None) if self.mode == "online" else getattr(self.run, "dir", run_dir)
        log.info("W&B run %s (%s): %s", self.run.id, self.mode, where)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The config-check hook every component has (see :mod:`launcher.validate`)."""
        long = [t for t in cfg.logger.tags if len(t) > MAX_TAG_LENGTH]
        errors.require(not long, "logger.tags", f"W&B takes tags of at most {MAX_TAG_LENGTH} characters "
                       f"(got {long}). Fix: shorten them")

    @property
    def run_id(self) -> str:
        return self.run.id

    @property
    def location(self) -> str:
        if self.mode == "online":
            return str(self.run.url)
        return str(Path(self.run.dir).parent)

    def last_step(self) -> int:
        """The highest ``step`` this W&B run already holds (-1 if none), so a resumed run can backfill the rest:
        the server's summary when online; the earlier offline files of the same run id otherwise."""
        if self.mode == "online":
            value = self.run.summary.get("step")
            return int(value) if value is not None else -1
        from launcher.wandb_offline import read_offline_run

        current = Path(self.run.dir).parent
        best = -1
        for folder in (self.run_dir / "wandb").glob(f"offline-run-*-{self.run.id}"):
            if folder.resolve() == current.resolve():
                continue
            steps = read_offline_run(folder).series("step")
            best = max([best, *(int(x) for x in steps)])
        return best

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_image(self, key: str, path: str | Path, step: int, caption: str = "") -> None:
        if self.log_images_enabled:
            self.run.log({key: self._wandb.Image(str(path), caption=caption)}, step=step)

    def finish(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)
