"""Per-step metrics to ``metrics.jsonl`` in the run directory and, when configured, to a dashboard backend.

The metric names are a public interface (README "Metrics"): ``step``, ``reward/*``, ``adv/*``, ``loss``,
``policy/*``, ``grad_norm``, ``lr``, ``time/*``, ``count/*``, ``health/*``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class RunLogger:
    """Only rank 0 writes (``enabled``). A resumed run keeps the rows already written and does not log again the
    steps it replays from its last checkpoint (each step appears once, in W&B and in metrics.jsonl; on a
    deterministic CPU run the replayed values equal the logged ones)."""

    def __init__(self, run_dir: str | Path, backend: Any | None = None, resume: bool = False,
                 enabled: bool = True):
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.backend = backend
        self.enabled = enabled
        self.history: list[dict] = []
        self.last_logged_step = -1
        if not enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume and self.metrics_path.exists():
            self.history = [json.loads(l) for l in self.metrics_path.read_text().splitlines() if l.strip()]
            self.last_logged_step = max((int(r["step"]) for r in self.history), default=-1)
        elif self.metrics_path.exists():
            self.metrics_path.unlink()

    def log(self, metrics: dict[str, float]) -> None:
        if not self.enabled or int(metrics["step"]) <= self.last_logged_step:
            return
        row = {k: (float(v) if not isinstance(v, (int, str)) else v) for k, v in metrics.items()}
        row = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self.history.append(row)
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        if self.backend is not None:
            self.backend.log({k: v for k, v in metrics.items()}, step=int(metrics["step"]))

    def log_image(self, key: str, path: Path, step: int, caption: str = "") -> None:
        if self.backend is not None and self.enabled and step > self.last_logged_step:
            self.backend.log_image(key, path, step, caption)

    def finish(self, exit_code: int = 0) -> None:
        if self.backend is not None:
            self.backend.finish(exit_code)
