"""Append-only JSON-lines files (``metrics.jsonl``) read back tolerantly.

A writer stopped mid-row (a full disk, a node lost during the write) leaves a last line that does not parse. Every
later restart, and so every SLURM requeue, used to die on it with a ``JSONDecodeError``. The reader here drops such a
last line with one warning naming the file and the byte offset, and (``heal=True``) cuts the file back to its last
whole row, so that the rows appended next start on a line of their own. A bad line before the last one is not a
torn write: it is an error naming the file and the line.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from rewardflow.errors import ConfigError

log = logging.getLogger(__name__)


def read_rows(path: str | Path, heal: bool = False) -> list[dict[str, Any]]:
    """The rows of ``path`` (an empty list if it does not exist), a torn last line left out (and, with ``heal``,
    cut off the file)."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    rows: list[dict[str, Any]] = []
    offset = 0
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        end = offset + len(line) + 1
        if line.strip():
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError("not a JSON object")
            except ValueError as e:
                if any(rest.strip() for rest in lines[number:]):
                    raise ConfigError(
                        f"{path}: line {number} is not a metrics row ({e}), and rows follow it. Fix: remove or "
                        f"repair that line (or move the file away to start the run's history over)"
                    ) from None
                log.warning(
                    "%s: its last line (from byte %d, %d bytes) is cut short (a writer stopped mid-row, e.g. on a "
                    "full disk) and is dropped%s",
                    path,
                    offset,
                    len(data) - offset,
                    "; the file is cut back to its last whole row" if heal else "",
                )
                if heal:
                    with path.open("r+b") as fh:
                        fh.truncate(offset)
                        fh.flush()
                        os.fsync(fh.fileno())
                return rows
            rows.append(row)
        offset = end
    if heal and data and not data.endswith(b"\n"):  # a whole last row without its newline: the next append needs one
        with path.open("ab") as fh:
            fh.write(b"\n")
    return rows
