"""Config of logger=none: no dashboard, only the run directory's files (launcher/tracking/run_logger.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class NoLoggerConfig:
    _target_: Optional[str] = None
    name: str = "none"


SCHEMAS = {"logger": {"none": NoLoggerConfig}}
