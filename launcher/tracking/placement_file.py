"""The run dir's ``placement.json``: where the run computed (device, dtype, ranks, mesh), resolved at start.

``model.device=auto`` does not say whether ``time/gpu_hours`` (ranks x wall-clock) counted GPUs or CPU processes;
this file does, and ``rewardflow-compare`` labels its compute axis by it (GPU-hours, or device-seconds on the CPU;
issue 25). The W&B config carries the same record as ``placement``. Written by the trainer, read without a model.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE = "placement.json"


def write(run_dir: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Writes ``record`` and returns it (the trainer hands the same to the W&B config)."""
    (run_dir / FILE).write_text(json.dumps(record) + "\n")
    return record


def read(run_dir: Path) -> dict[str, Any]:
    """The record, or ``{}`` when the run has none (older runs) or it is unreadable (with a warning)."""
    path = run_dir / FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        log.warning("%s is not JSON; the run's device is unknown", path)
        return {}
    return data if isinstance(data, dict) else {}
