"""A plain log line every ``trainer.log_every`` steps (and after the first and the last, and at least once a
:data:`MAX_QUIET_S`), for runs nobody watches live.

The progress bar only exists on a terminal; sweeps, SLURM jobs and ``trainer.progress=false`` runs would otherwise
print nothing between start and end. The line goes to the console and the run's log file; while the progress bar
is drawn, only to the log file (the bar shows the same numbers), so the log always holds the run's course. The time
rule keeps a log file that a sweep's point writes moving when steps are slow and ``log_every`` large (a run of 10
slow steps logged only its first and last; docs/clusters.md#local-sweeps). It names the step by its index, as
metrics.jsonl, W&B, the checkpoints and the image grids do (``step 19`` is the row with ``"step": 19`` and
``checkpoints/step_00000019``; docs/metrics.md#step-numbering), and says how many steps are done::

    step 19 (20/150 done) | reward/mean 0.7913 (std 0.0842) | loss -0.0031 | grad_norm 0.412 | 0.81 s/step | ETA 1m45s
"""

from __future__ import annotations

import logging
import math
import sys
import time

from launcher.tracking.log_files import log_to_files

log = logging.getLogger("rewardflow")

#: (metric, label, format) shown when the step logged it
FIELDS = (("loss", "loss", "{:.4g}"), ("grad_norm", "grad_norm", "{:.3g}"))
#: a step that ends this long after the last line gets one, whatever ``log_every`` says
MAX_QUIET_S = 60.0


def progress_bar_shown(progress: bool, is_main: bool) -> bool:
    """The bar is drawn by rank 0 on a terminal only (a SLURM log file would fill with carriage returns)."""
    return bool(progress) and is_main and sys.stderr.isatty()


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def _number(value, fmt: str) -> str:
    return "nan" if value is None or not math.isfinite(float(value)) else fmt.format(float(value))


def format_line(metrics: dict, total_steps: int, seconds_per_step: float) -> str:
    done = int(metrics["step"]) + 1
    parts = [
        f"step {done - 1} ({done}/{total_steps} done)",
        f"reward/mean {_number(metrics.get('reward/mean'), '{:.4f}')} "
        f"(std {_number(metrics.get('reward/std'), '{:.4f}')})",
    ]
    parts += [f"{label} {_number(metrics[key], fmt)}" for key, label, fmt in FIELDS if key in metrics]
    if metrics.get("health/skipped_updates"):
        parts.append(f"skipped updates {int(metrics['health/skipped_updates'])}")
    parts.append(f"{seconds_per_step:.2f} s/step")
    parts.append(f"ETA {_duration((total_steps - done) * seconds_per_step)}")
    return " | ".join(parts)


class StepLog:
    def __init__(self, every: int, total_steps: int, bar_shown: bool, enabled: bool = True):
        self.every, self.total, self.bar_shown = int(every), int(total_steps), bar_shown
        self.enabled = enabled and self.every > 0
        self._seconds, self._steps = 0.0, 0
        self._last_line = time.monotonic()

    def __call__(self, metrics: dict) -> None:
        self._seconds += float(metrics.get("time/step_s", 0.0))
        self._steps += 1
        done = int(metrics["step"]) + 1
        quiet_too_long = time.monotonic() - self._last_line >= MAX_QUIET_S
        if not self.enabled or (done % self.every and done not in (1, self.total) and not quiet_too_long):
            return
        self._last_line = time.monotonic()
        line = format_line(metrics, self.total, self._seconds / self._steps)
        if self.bar_shown:
            log_to_files(log, logging.INFO, line)
        else:
            log.info(line)
