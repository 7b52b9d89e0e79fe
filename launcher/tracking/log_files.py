"""Write a log record to the run's log file (``<run dir>/rewardflow.log``, Hydra's file handler) without printing it
on the console: for text the console already shows another way (a config error printed on stderr, per-step
metrics while the progress bar is drawn)."""

from __future__ import annotations

import logging


def log_to_files(logger: logging.Logger, level: int, message: str) -> None:
    record = logger.makeRecord(logger.name, level, "(rewardflow)", 0, message, (), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and record.levelno >= handler.level:
            handler.handle(record)
