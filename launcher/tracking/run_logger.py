"""Per-step metrics to ``metrics.jsonl`` in the run directory and, when configured, to a dashboard backend.

The metric names are a public interface (docs/metrics.md): ``step``, ``reward/*``, ``adv/*``, ``loss``,
``policy/*``, ``grad_norm``, ``lr``, ``time/*``, ``count/*``, ``health/*``; and ``eval/*`` in the rows of the held-out
evaluation (docs/evaluation.md), which are rows of their own.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from launcher.tracking.media import MediaFile
from launcher.tracking.metric_names import is_evaluation_row
from rewardflow.jsonl import read_rows

log = logging.getLogger(__name__)


class RunLogger:
    """Only rank 0 writes (``enabled``). A resumed run keeps the rows already written and does not log again the
    steps it replays from its last checkpoint (each step appears once, in W&B and in metrics.jsonl; on a
    deterministic CPU run the replayed values equal the logged ones).

    ``metrics.jsonl`` is the source of truth. The dashboard backend may die under us: SLURM preemption sends
    SIGTERM to every process of the job step, W&B's service process included, and ``wandb.log`` only starts raising
    a few calls later, so some rows are lost without an error. Training must still reach its checkpoint: a failing
    backend is dropped with a warning. On resume, the backend reports the last step it really holds
    (``backend.last_step()``) and the logger backfills every later row of ``metrics.jsonl`` into the same run, so
    the dashboard ends with each step exactly once.

    An evaluation row (one with ``eval/*`` keys, :meth:`log_eval`) shares its step with the training row of that
    step (it measures the model before that step trains), so the two kinds are deduplicated separately: each
    evaluation point, like each training step, is written once however often a resumed run replays it.
    """

    def __init__(self, run_dir: str | Path, backend: Any | None = None, resume: bool = False, enabled: bool = True):
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.backend = backend
        self.enabled = enabled
        self.history: list[dict] = []
        self.last_logged_step = -1  # of training rows
        self.last_eval_step = -1  # of evaluation rows
        if not enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume and self.metrics_path.exists():
            self.history = read_rows(self.metrics_path, heal=True)  # a row torn by a full disk is cut off
            self.last_logged_step = max((int(r["step"]) for r in self.history if not is_eval_row(r)), default=-1)
            self.last_eval_step = max((int(r["step"]) for r in self.history if is_eval_row(r)), default=-1)
            self._backfill()
        elif self.metrics_path.exists() and self.metrics_path.stat().st_size:
            # a run dir started over keeps its earlier history beside the new one, never replaced by it
            aside = self.run_dir / f"metrics.before-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
            os.replace(self.metrics_path, aside)
            log.warning("this run starts at step 0: the run dir's earlier metrics.jsonl was moved to %s", aside)
        elif self.metrics_path.exists():
            self.metrics_path.unlink()

    def _backfill(self) -> None:
        """Send the rows of metrics.jsonl that the dashboard does not hold yet (in step order)."""
        if self.backend is None or not hasattr(self.backend, "last_step"):
            return
        have = self.backend.last_step()
        missing = [r for r in self.history if int(r["step"]) > have]
        for row in missing:
            self._send(row)
        if missing:
            log.info(
                "sent %d metric rows (steps %d-%d) that the dashboard had missed",
                len(missing),
                missing[0]["step"],
                missing[-1]["step"],
            )

    def _send(self, row: dict) -> None:
        if self.backend is None:
            return
        try:
            self.backend.log(row, step=int(row["step"]))
        except Exception as e:  # noqa: BLE001 - a dashboard failure must never stop training
            log.warning(
                "dashboard logging failed (%s: %s); continuing with metrics.jsonl only (a resumed run "
                "backfills the dashboard)",
                type(e).__name__,
                e,
            )
            self.backend = None

    def log(self, metrics: dict[str, float]) -> None:
        if not self.enabled or int(metrics["step"]) <= self.last_logged_step:
            return
        self._write(metrics)

    def log_eval(self, metrics: dict[str, float]) -> None:
        """An evaluation row (its own row, ``eval/*`` keys and the compute axes); written once per step."""
        if not self.enabled or int(metrics["step"]) <= self.last_eval_step:
            return
        self.last_eval_step = int(metrics["step"])
        self._write(metrics)

    def _write(self, metrics: dict[str, float]) -> None:
        row: dict[str, float | int | str | None] = {
            k: (float(v) if not isinstance(v, (int, str)) else v) for k, v in metrics.items()
        }
        row = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self.history.append(row)
        try:
            with self.metrics_path.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
        except OSError as e:  # a full disk raises on write or close without naming the file
            raise OSError(e.errno, e.strerror, str(self.metrics_path)) from e
        self._send(row)

    def log_image(self, key: str, path: Path, step: int, caption: str = "") -> None:
        self._log_media(key, step, "log_image", key, path, step, caption)

    def log_media(self, key: str, files: list[MediaFile], step: int) -> None:
        """One image or video per sample (launcher/tracking/media.py), each captioned, under ``key``."""
        self._log_media(key, step, "log_media", key, files, step)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        """A table of samples (a :class:`launcher.tracking.media.MediaFile` cell is shown as its image or video)."""
        self._log_media(key, step, "log_table", key, columns, rows, step)

    def _log_media(self, key: str, step: int, call: str, *args: Any) -> None:
        """Media go to the dashboard only (the files are in the run dir), once per step, and never stop training."""
        if self.backend is not None and self.enabled and step > self.last_logged_step:
            try:
                getattr(self.backend, call)(*args)
            except Exception as e:  # noqa: BLE001
                log.warning("could not log %s of step %d to the dashboard (%s: %s)", key, step, type(e).__name__, e)

    def finish(self, exit_code: int = 0) -> None:
        if self.backend is not None:
            try:
                self.backend.finish(exit_code)
            except Exception as e:  # noqa: BLE001
                log.warning("dashboard finish failed (%s); metrics are in %s", e, self.metrics_path)


def is_eval_row(row: dict) -> bool:
    """Whether a metrics row is an evaluation's (:meth:`RunLogger.log_eval`: ``eval/*`` or ``val/*`` metrics)."""
    return is_evaluation_row(row)
