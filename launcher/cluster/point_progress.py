"""How far a sweep point has come, from its run dir, and the time left to a point and to the whole sweep.

Read by ``rewardflow-status`` (launcher/cluster/sweep_status.py) and by the local sweep launcher's progress lines
(launcher/cluster/local_sweep.py), from what every run writes: ``metrics.jsonl`` (a row per step with ``step``,
``reward/mean`` and ``time/step_s``; evaluation rows have no ``reward/mean``) and ``.hydra/config.yaml``
(``trainer.steps``). Steps are counted as the console counts them: completed steps, so ``4/4 steps`` follows the
row with ``"step": 3`` (docs/clusters.md#following-a-sweep).

The time left is an estimate: a point's remaining steps x its recent seconds per step (the mean of its last
:data:`RECENT` steps, which leaves out the slow first step); a point that has not started yet is costed at the
mean seconds per step of the points that have. A sweep's time left is the largest of its points' (they all run at
once) or, when at most ``concurrency`` run at a time (``cluster.parallel``), their sum / ``concurrency`` if larger.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

#: steps whose mean time per step predicts the next ones
RECENT = 10


@dataclass
class PointProgress:
    done: int = 0  # completed steps
    total: int | None = None  # trainer.steps (None: not known yet)
    reward: float | None = None  # the last step's reward/mean
    s_per_step: float | None = None  # mean of the last RECENT steps

    def remaining_s(self, fallback_s_per_step: float | None = None) -> float | None:
        per_step = self.s_per_step if self.s_per_step is not None else fallback_s_per_step
        if self.total is None or per_step is None:
            return None
        return max(0, self.total - self.done) * per_step

    def steps_text(self) -> str:
        return f"{self.done}/{self.total} steps" if self.total else "start-up"

    def reward_text(self) -> str:
        return "" if self.reward is None or not math.isfinite(self.reward) else f"reward {self.reward:.4f}"


def run_total_steps(run_dir: Path) -> int | None:
    config = run_dir / ".hydra" / "config.yaml"
    if not config.exists():
        return None
    from omegaconf import DictConfig, OmegaConf

    loaded = OmegaConf.load(config)
    if not isinstance(loaded, DictConfig):  # a run's config is a mapping
        return None
    steps = loaded.get("trainer", {}).get("steps")
    return int(steps) if isinstance(steps, int) else None


def read_progress(run_dir: Path, total: int | None = None) -> PointProgress:
    """The point's progress (``total``: its ``trainer.steps`` when the caller knows it already)."""
    p = PointProgress(total=total if total is not None else run_total_steps(run_dir))
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists():
        return p
    times: list[float] = []
    for line in metrics.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
            step = int(row["step"])
        except (ValueError, KeyError, TypeError):
            continue  # a line being written, or another kind of row
        if "reward/mean" not in row:
            continue  # an evaluation row
        p.done = max(p.done, step + 1)
        p.reward = row["reward/mean"] if isinstance(row["reward/mean"], (int, float)) else None
        if isinstance(row.get("time/step_s"), (int, float)):
            times.append(float(row["time/step_s"]))
    recent = times[1:][-RECENT:] or times  # the first step compiles and warms caches
    p.s_per_step = sum(recent) / len(recent) if recent else None
    return p


def mean_s_per_step(points: list[PointProgress]) -> float | None:
    known = [p.s_per_step for p in points if p.s_per_step is not None]
    return sum(known) / len(known) if known else None


def sweep_remaining_s(unfinished: list[PointProgress], concurrency: int | None) -> float | None:
    """Time left to the sweep's end (None when a point's cannot be estimated yet); ``concurrency`` None: every
    point runs at once (SLURM)."""
    fallback = mean_s_per_step(unfinished)
    left = [p.remaining_s(fallback) for p in unfinished]
    if not left:
        return 0.0
    if any(s is None for s in left):
        return None
    known = [s for s in left if s is not None]
    return max(max(known), sum(known) / max(1, concurrency or len(known)))


def duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``42s``; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")
