"""Weights & Biases backend: run config = the full resolved Hydra config, group/tags from method, model, reward and
the sweep, and the compute axes ``time/wallclock_s`` / ``time/gpu_hours`` registered with ``define_metric`` so
dashboards can plot any metric against them.

W&B's own set-up is honoured as W&B documents it (docs/wandb.md): ``logger.mode=auto`` (the default) takes
``WANDB_MODE`` if set, else the mode ``wandb online`` / ``wandb offline`` saved in a W&B settings file, else online
when W&B credentials are configured in any usual way (``WANDB_API_KEY``, ``wandb login``'s netrc entry, an
``api_key`` in a settings file, ``WANDB_IDENTITY_TOKEN_FILE``) and offline otherwise; an explicit ``logger.mode``
wins, like a ``wandb.init(mode=...)`` argument. ``logger.project`` / ``logger.entity`` left unset defer to
``WANDB_PROJECT`` / ``WANDB_ENTITY`` (or a settings file), then to project ``rewardflow`` and the account's default
entity. The run's URL, or its offline folder and the ``wandb sync`` command, is logged at start.
"""

from __future__ import annotations

import configparser
import logging
import os
from pathlib import Path
from typing import Any

from launcher.tracking.media import MediaFile
from launcher.tracking.wandb_logger_config import WandbLoggerConfig, WandbMode
from rewardflow.errors import ConfigError

log = logging.getLogger(__name__)

#: an evaluation's compute is on keys of its own: W&B merges it into the training row of its step (docs/evaluation.md)
COMPUTE_AXES = ("time/wallclock_s", "time/gpu_hours", "time/eval_wallclock_s", "time/eval_gpu_hours")
DEFAULT_PROJECT = "rewardflow"


def _wandb_settings():
    """W&B's global settings as ``wandb.init`` sees them: environment variables and settings files."""
    import wandb

    return wandb.setup().settings


def _settings_file_mode(settings) -> str | None:
    """The mode ``wandb online`` / ``wandb offline`` wrote into a settings file (the workspace one wins)."""
    mode: str | None = None
    for path in (settings.settings_system, settings.settings_workspace):
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except (configparser.Error, TypeError):
            continue
        mode = parser.get("default", "mode", fallback=None) or mode
    if mode is None:
        return None
    return {"dryrun": "offline", "run": "online"}.get(mode, mode)


def credentials_source(settings) -> str | None:
    """Where W&B would find credentials for its server (None if nowhere)."""
    if os.environ.get("WANDB_API_KEY"):
        return "WANDB_API_KEY"
    if settings.api_key:
        return "the api_key of a W&B settings file"
    if os.environ.get("WANDB_IDENTITY_TOKEN_FILE") or settings.identity_token_file:
        return "WANDB_IDENTITY_TOKEN_FILE"
    from wandb.sdk.lib.wbauth import read_netrc_auth  # the reader `wandb login` writes for (pinned wandb)

    try:
        if read_netrc_auth(host=settings.base_url):
            return "`wandb login` (netrc)"
    except Exception as e:  # noqa: BLE001 - a malformed entry: wandb.init would fail online too
        log.warning("ignoring the W&B netrc entry: %s", e)
    return None


def resolve_mode(mode: str) -> tuple[str, str]:
    """(the W&B mode to run in, why), following the precedence in the module docstring."""
    if mode not in tuple(WandbMode):
        raise ConfigError(
            f"logger.mode must be one of {', '.join(WandbMode)} (got {mode!r}). Fix: logger.mode=auto "
            f"follows WANDB_MODE and your W&B login"
        )
    if mode != WandbMode.auto:
        return str(mode), f"logger.mode={mode}"
    settings = _wandb_settings()
    if os.environ.get("WANDB_MODE"):
        return settings.mode, f"WANDB_MODE={os.environ['WANDB_MODE']}"
    saved = _settings_file_mode(settings)
    if saved in ("online", "offline", "disabled"):
        return saved, f"`wandb {saved}` (a W&B settings file)"
    source = credentials_source(settings)
    if source:
        return "online", f"W&B credentials from {source}"
    return "offline", "no W&B credentials: set WANDB_API_KEY or run `wandb login` to log online"


class WandbLogger:
    """Thin wrapper over a ``wandb`` run, built from its typed config (:class:`WandbLoggerConfig`) and the run's
    names (the trainer picks ``group``, ``tags``, ``run_name`` and ``job_type`` from the config, W&B's variables or
    the sweep: launcher/tracking/run_names.py). ``run_id`` resumes
    an existing run (same id, no duplicated steps)."""

    def __init__(
        self,
        cfg: WandbLoggerConfig,
        run_dir: str | Path,
        run_config: dict[str, Any],
        group: str | None = None,
        tags: list[str] | None = None,
        run_name: str | None = None,
        run_id: str | None = None,
        job_type: str | None = None,
    ):
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.mode, why = resolve_mode(cfg.mode)
        self.run_dir = Path(run_dir)
        self.log_images_enabled = cfg.log_images
        self._wandb = wandb
        project = cfg.project
        if self.mode != "disabled":
            project = project or _wandb_settings().project or DEFAULT_PROJECT
        kwargs: dict[str, Any] = dict(
            project=project,
            entity=cfg.entity,
            dir=str(run_dir),
            config=run_config,
            group=group,
            tags=list(tags or []),
            name=run_name,
            job_type=job_type,
            id=run_id,
            resume="allow" if run_id else None,
            reinit="finish_previous",
        )
        try:
            # wandb.init takes every mode its settings take ("dryrun" from WANDB_MODE too); its annotation is narrower
            self.run = wandb.init(mode=self.mode, **kwargs)  # type: ignore[arg-type]
        except Exception as e:  # noqa: BLE001 - only a mode chosen for the user falls back
            if cfg.mode != WandbMode.auto or self.mode != "online":
                raise
            first_line = (str(e).strip().splitlines() or [""])[0]
            log.warning(
                "W&B online start failed (%s: %s); logging offline instead (%s)", type(e).__name__, first_line, why
            )
            self.mode, why = "offline", "online start failed"
            self.run = wandb.init(mode="offline", **kwargs)
        self.run.define_metric("step")
        for axis in COMPUTE_AXES:  # compute axes: selectable as x-axis, summarised by their max
            self.run.define_metric(axis, step_metric="step", summary="max")
        self.run.define_metric("*", step_metric="step")
        log.info("W&B run %s, %s (%s): %s", self.run.id, self.mode, why, self.start_message())

    def start_message(self) -> str:
        if self.mode == "online":
            return str(self.run.url)
        if self.mode == "offline":
            return f"{self.location}; upload it with `wandb sync {self.location}`"
        return "nothing is logged to W&B (metrics.jsonl only)"

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
        from launcher.tracking.wandb_offline import read_offline_run

        current = Path(self.run.dir).parent
        best = -1
        for folder in (self.run_dir / "wandb").glob(f"offline-run-*-{self.run.id}"):
            if folder.resolve() == current.resolve():
                continue
            try:
                steps = read_offline_run(folder).series("step")
            except (OSError, ValueError) as e:  # a 0-byte or torn file (a full disk): it holds no step we can see
                log.warning("%s cannot be read (%s): counted as holding no steps", folder, e)
                continue
            best = max([best, *(int(x) for x in steps)])
        return best

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_image(self, key: str, path: str | Path, step: int, caption: str = "") -> None:
        if self.log_images_enabled:
            self.run.log({key: self._wandb.Image(str(path), caption=caption)}, step=step)

    def _medium(self, media: MediaFile):
        """A written sample as W&B shows it: a ``wandb.Video`` for a video file (played as written, at its own frame
        rate), else a ``wandb.Image``; captioned."""
        if media.video:
            return self._wandb.Video(str(media.path), caption=media.caption)
        return self._wandb.Image(str(media.path), caption=media.caption)

    def log_media(self, key: str, files: list[MediaFile], step: int) -> None:
        """One image or video per sample under ``key``, each with its own caption (docs/wandb.md#samples-and-videos)."""
        if self.log_images_enabled and files:
            self.run.log({key: [self._medium(f) for f in files]}, step=step)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        """A ``wandb.Table`` under ``key``; a :class:`MediaFile` cell becomes its image or video."""
        if self.log_images_enabled and rows:
            data = [[self._medium(c) if isinstance(c, MediaFile) else c for c in row] for row in rows]
            self.run.log({key: self._wandb.Table(columns=columns, data=data)}, step=step)

    def finish(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)
