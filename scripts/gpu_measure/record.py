"""The GPU check's output: one JSON object per line per measurement in ``<out>/gpu_check.jsonl``, appended and flushed
the moment it is measured (a run stopped by the device's time limit keeps every line written before), and the
summary table printed at the end.

Every line has ``section``, ``label`` (what was measured, in words), ``status`` (ok, oom, skipped, error, timeout)
and ``elapsed_s`` (since the check started); the figures a section measures use these names where they apply:
``seconds`` (median of the timed repetitions), ``tflops`` (executed FLOP/s / 1e12), ``mfu`` (model FLOP/s over the
measured bf16 matmul ceiling), ``peak_gib`` (peak allocated device memory), ``value`` (the section's headline
figure in words, for the table).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

JSONL_NAME = "gpu_check.jsonl"


def finite_json(value):
    """NaN / inf become null (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


class Recorder:
    def __init__(self, out_dir: Path, start: float, echo=print):
        self.path = out_dir / JSONL_NAME
        self.start, self.echo = start, echo
        self.lines: list[dict] = []
        self.path.write_text("")

    def write(self, section: str, label: str, status: str = "ok", **figures) -> dict:
        line = finite_json(
            {
                "section": section,
                "label": label,
                "status": status,
                **figures,
                "elapsed_s": round(time.monotonic() - self.start, 2),
            }
        )
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.lines.append(line)
        self.echo(f"  {section} | {label} | {status} | {_brief(line)}")
        return line


def _fmt(x, name: str = "") -> str:
    if x is None:
        return ""
    if name == "mfu" and isinstance(x, (int, float)):
        return f"{x:.1%}"
    if isinstance(x, float):
        return f"{x:.1f}" if abs(x) >= 100 else f"{x:.3g}"
    return str(x)


def _brief(line: dict) -> str:
    keys = ("seconds", "tflops", "mfu", "peak_gib", "value", "reason", "error")
    return ", ".join(f"{k} {_fmt(line[k], k)}" for k in keys if line.get(k) is not None)


COLUMNS = (
    ("section", 12),
    ("label", 36),
    ("status", 7),
    ("seconds", 8),
    ("tflops", 8),
    ("mfu", 6),
    ("peak_gib", 8),
    ("value", 44),
)


def summary_table(lines: list[dict]) -> str:
    """One row per measurement line (section status lines included), the figures the table has columns for."""
    head = " ".join(name.ljust(width) for name, width in COLUMNS)
    rows = [head, "-" * len(head)]
    for line in lines:
        cells = []
        for name, width in COLUMNS:
            text = _fmt(line.get(name), name)
            if name == "value" and line.get("status") not in ("ok", None) and not text:
                text = str(line.get("reason") or line.get("error") or "")
            cells.append(text[:width].ljust(width))
        rows.append(" ".join(cells).rstrip())
    return "\n".join(rows)
