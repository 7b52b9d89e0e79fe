"""The last line of a run: its run dir, the outputs it wrote there, and where its W&B run is.

It lists what the run wrote, not what a run may write: ``trainer.sample_every=0`` draws no image grids, so
``samples/`` is named only when it exists (issue 29; the outputs: docs/metrics.md#outputs-of-a-run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: the outputs named, in this order, when the run wrote them
OUTPUTS = ("metrics.jsonl", "reward_curve.png", "samples/")


def closing_line(run_dir: Path, backend: Any = None) -> str:
    """``run dir <dir>: metrics.jsonl, reward_curve.png[, samples/][; W&B (<mode>): <location>]``."""
    wrote = ", ".join(name for name in OUTPUTS if (run_dir / name).exists()) or "no outputs"
    where = f"; W&B ({backend.mode}): {backend.location}" if backend is not None else ""
    return f"run dir {run_dir}: {wrote}{where}"
