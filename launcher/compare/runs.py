"""The record every source (run folder, offline W&B file, W&B online run) is turned into, and config-key helpers.

Metric names are the public ones the trainer logs (docs/metrics.md); nothing here depends on where a run came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from launcher.tracking.metric_names import is_evaluation

REWARD = "reward/mean"
# compute axes: name on the command line -> logged metric
AXES = {"step": "step", "wallclock_s": "time/wallclock_s", "gpu_hours": "time/gpu_hours"}
#: the same axes for held-out evaluations (``eval/*``): the compute before the evaluation, on keys of their own so that
#: merging an evaluation into the training row of its step (W&B does) cannot move it (docs/evaluation.md)
EVAL_AXES = {"step": "step", "wallclock_s": "time/eval_wallclock_s", "gpu_hours": "time/eval_gpu_hours"}
DEVICES = ("cpu", "cuda")
PHASES = ("time/rollout_s", "time/reward_s", "time/update_s")
STEP_TIME = "time/step_s"
COUNTS = ("count/transformer_fwd", "count/transformer_bwd")
ABSENT = object()  # a config key a run does not have


def axis_key(axis: str, metric_key: str) -> str:
    """The logged x of ``axis`` for the metric ``metric_key``: an evaluation's own compute keys for ``eval/*`` and
    ``val/*``."""
    return (EVAL_AXES if is_evaluation(metric_key) else AXES)[axis]


@dataclass
class RunData:
    """One training run: who it is, its resolved config (nested, as the trainer logs it) and its per-step rows."""

    run_id: str
    name: str
    source: str  # the folder, file or W&B URL it was read from
    config: dict[str, Any]
    rows: list[dict[str, Any]]  # one row per logged step, sorted by step, one row per step (last write wins)
    group: str | None = None  # the W&B group (sweep-<ts> for `rewardflow -m`)
    state: str | None = None  # W&B run state when known (finished, crashed, running...)
    tags: list[str] = field(default_factory=list)
    placement: dict[str, Any] = field(default_factory=dict)  # the run dir's placement.json, when it has one

    @property
    def device(self) -> str | None:
        """``cpu`` or ``cuda``: where the run computed, as the trainer recorded it (launcher/cluster/device_check.py),
        else an explicit ``model.device``; None when neither says (``model.device=auto`` in an older run)."""
        for value in (self.placement.get("device"), self.get("placement.device"), self.get("model.device")):
            if value in DEVICES:
                return str(value)
        return None

    def series(self, key: str) -> np.ndarray:
        """The metric over the rows as floats; NaN where the row lacks it or logged null (a skipped step)."""
        return np.array([_as_float(r.get(key)) for r in self.rows], dtype=float)

    def has(self, key: str) -> bool:
        return any(r.get(key) is not None for r in self.rows)

    def get(self, dotted: str, default: Any = None) -> Any:
        return config_get(self.config, dotted, default)

    @property
    def seed(self) -> Any:
        return self.get("trainer.seed")


def axis_scale(axis: str, device: str | None) -> float:
    """``time/gpu_hours`` is ranks x wall-clock: GPU-hours on GPUs, shown as device-seconds (x 3600) on the CPU."""
    return 3600.0 if axis == "gpu_hours" and device == "cpu" else 1.0


def axis_unit(axis: str, device: str | None) -> str:
    """The short unit of an axis for table titles: what was measured, never GPU-h for CPU runs."""
    if axis == "gpu_hours":
        return {"cpu": "device-s", "cuda": "GPU-h"}.get(device or "", "device-h")
    return {"step": "steps", "wallclock_s": "wall-clock s"}[axis]


def axis_label(axis: str, device: str | None) -> str:
    """The long name of an axis for figures and the report's first line."""
    if axis == "gpu_hours":
        return {
            "cpu": "device-seconds (CPU processes x wall-clock)",
            "cuda": "GPU-hours",
        }.get(device or "", "device-hours (device not recorded: GPUs or CPU processes x wall-clock)")
    return {"step": "step", "wallclock_s": "wall-clock (s)"}[axis]


def _as_float(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def clean_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep rows that carry a step, one per step (a resumed run re-logs steps: the last write wins), in step order.

    W&B rows without the ``step`` metric fall back to ``_step``; image-only rows merge into their step's row."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        step = row.get("step", row.get("_step"))
        if step is None or isinstance(step, bool):
            continue
        try:
            step = int(step)
        except (TypeError, ValueError):
            continue
        merged = by_step.setdefault(step, {})
        merged.update({k: v for k, v in row.items() if not _is_media(v)})
        merged["step"] = step
    return [by_step[s] for s in sorted(by_step)]


def _is_media(v: Any) -> bool:
    """W&B stores images and tables as dicts ({"_type": "image-file", ...}); they are not metrics."""
    return isinstance(v, dict)


def unwrap_config(config: dict[str, Any]) -> dict[str, Any]:
    """Drop W&B's internal keys and ``{"value": ..., "desc": ...}`` wrappers (raw configs from some API paths)."""
    out = {}
    for k, v in (config or {}).items():
        if str(k).startswith("_"):
            continue
        if isinstance(v, dict) and set(v) <= {"value", "desc"} and "value" in v:
            v = v["value"]
        out[k] = v
    return out


def config_get(config: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """``config_get(cfg, "method.window_size")``; a flat ``"method.window_size"`` key (W&B sweeps) also works."""
    if dotted in config:
        return config[dotted]
    node: Any = config
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return default
    return node


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> ``{"a.b.c": value}``; lists stay values (a list is one setting, e.g. window_range)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def show(value: Any) -> str:
    """A config value the way a user would type it on the command line."""
    if value is ABSENT or value is None:
        return "null" if value is None else "(absent)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
