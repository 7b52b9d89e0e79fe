"""The numbers of a comparison: seed curves on a common grid, final reward, per-step cost, the reward reached at a
common compute budget, and the compute each group needs to reach the baseline's final reward.

Definitions (also printed under the report's tables):

- A run's reward curve is ``reward/mean`` smoothed by a trailing mean over the last ``smooth`` logged steps
  (per-step rewards are means over one batch and noisy); its final reward is the curve's last value.
- A group's curve is the mean over its seeds of their curves on a common grid: the steps when the seeds logged
  the same steps (x = the seeds' mean compute at each step), else the union of the seeds' logged x-values with each
  seed linearly interpolated (a seed that has ended keeps its final value). The band is the spread over seeds at
  each grid point (std with ddof=1, standard error, or min-max).
- Compute of a run on the chosen axis: ``time/gpu_hours`` or ``time/wallclock_s`` at its last logged step, or
  the number of steps done (last step + 1).
- Common budget: the smallest total compute of any run compared (every run reached it); reward at the budget is
  each seed's curve there, averaged over seeds.
- Compute to reach R (R = the baseline's final reward): the first x at which the group's mean curve reaches R
  (linear between grid points). Speedup = baseline's compute to reach R / the group's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from launcher.compare.errors import CompareError
from launcher.compare.grouping import Group
from launcher.compare.runs import AXES, COUNTS, PHASES, REWARD, STEP_TIME, RunData

BANDS = ("std", "sem", "minmax")


@dataclass
class Settings:
    axis: str = "gpu_hours"          # compute axis for budget and speedup: step | wallclock_s | gpu_hours
    smooth: int = 10                 # trailing window (logged steps) of the reward curves and the final reward
    band: str = "std"
    warmup_steps: int = 1            # first steps left out of the per-step timings (lazy init, allocator warm-up)
    budget: float | None = None      # common budget in axis units; None = the smallest total among the runs


@dataclass
class Trace:
    """One run's reward curve on each axis, NaN-reward steps (skipped updates) left out."""

    run: RunData
    x: dict[str, np.ndarray]         # axis -> raw logged x (step, time/wallclock_s, time/gpu_hours)
    reward: np.ndarray               # smoothed reward/mean
    raw_reward: np.ndarray

    @property
    def final(self) -> float:
        return float(self.reward[-1])

    def total(self, axis: str) -> float:
        return float(self.x[axis][-1]) + axis_offset(axis)


@dataclass
class Curve:
    x: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


@dataclass
class Stat:
    """A value over seeds: mean and spread (``lo``/``hi`` band; ``spread`` is the ± half-width or NaN)."""

    mean: float
    lo: float
    hi: float
    spread: float
    n: int
    values: list[float] = field(default_factory=list)


@dataclass
class GroupResult:
    label: str
    runs: list[RunData]
    traces: list[Trace]
    steps: list[int]                          # logged steps with a reward, per run
    final: Stat
    total: dict[str, Stat]                    # axis -> total compute per run
    per_step: dict[str, Stat]                 # time/step_s, time/<phase>_s, count/transformer_* -> per-step mean
    curves: dict[str, Curve]                  # axis -> seed-mean curve
    at_budget: Stat | None = None
    reach: float | None = None                # compute (axis units) to reach the target; None = not reached
    best: float = math.nan                    # highest value of the mean curve (what "not reached" stopped at)
    speedup: float | None = None


@dataclass
class Comparison:
    settings: Settings
    groups: list[GroupResult]
    baseline: str
    budget: float
    target: float                              # the baseline's final reward
    budget_runs_ended_before: list[str] = field(default_factory=list)


def axis_offset(axis: str) -> float:
    """Steps are logged 0-based; as compute the step axis counts steps done."""
    return 1.0 if axis == "step" else 0.0


def trailing_mean(y: np.ndarray, k: int) -> np.ndarray:
    k = max(int(k), 1)
    c = np.concatenate([[0.0], np.cumsum(y)])
    idx = np.arange(1, len(y) + 1)
    lo = np.maximum(idx - k, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def make_trace(run: RunData, smooth: int, axes=tuple(AXES)) -> Trace:
    reward = run.series(REWARD)
    keep = np.isfinite(reward)
    x = {}
    for axis in axes:
        values = run.series(AXES[axis])[keep]
        if len(values) and np.isfinite(values).all():
            # cumulative axes never go down; if a resumed run restarted its clock, keep the curve drawable
            x[axis] = np.maximum.accumulate(values)
    if not keep.any():
        raise CompareError(f"run {run.name} ({run.source}) logged no {REWARD}")
    return Trace(run=run, x=x, reward=trailing_mean(reward[keep], smooth), raw_reward=reward[keep])


def spread(values, band: str) -> Stat:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if not len(v):
        return Stat(math.nan, math.nan, math.nan, math.nan, 0, [])
    m = float(v.mean())
    if band == "minmax":
        return Stat(m, float(v.min()), float(v.max()), math.nan, len(v), v.tolist())
    half = float(v.std(ddof=1)) if len(v) > 1 else math.nan
    if band == "sem" and len(v) > 1:
        half /= math.sqrt(len(v))
    width = 0.0 if math.isnan(half) else half
    return Stat(m, m - width, m + width, half, len(v), v.tolist())


def seed_curve(traces: list[Trace], axis: str, band: str) -> Curve:
    """Mean and band over seeds on a common grid.

    Seeds that logged the same steps (the usual case) share the step grid: at each step, the mean of their rewards
    at the mean of their compute. Their compute per step differs only by machine noise, and this way the group
    reaches its own final reward exactly at its mean total compute. Otherwise (different lengths, skipped steps)
    each seed is interpolated onto the union of the seeds' x-values, from the latest first point on (before it,
    some seed has no value), and a seed past its last point holds its final value."""
    steps = [t.x["step"] for t in traces]
    if all(len(s) == len(steps[0]) and np.array_equal(s, steps[0]) for s in steps):
        grid = np.mean([t.x[axis] for t in traces], axis=0)
        ys = np.stack([t.reward for t in traces])
    else:
        xs = [t.x[axis] for t in traces]
        start = max(float(x[0]) for x in xs)
        grid = np.unique(np.concatenate(xs))
        grid = grid[grid >= start]
        # np.interp holds the end values outside the data range: exactly "a finished seed keeps its final value"
        ys = np.stack([np.interp(grid, x, t.reward) for x, t in zip(xs, traces)])
    mean = ys.mean(axis=0)
    if band == "minmax":
        return Curve(grid, mean, ys.min(axis=0), ys.max(axis=0))
    half = ys.std(axis=0, ddof=1) if len(ys) > 1 else np.zeros_like(mean)
    if band == "sem" and len(ys) > 1:
        half = half / math.sqrt(len(ys))
    return Curve(grid, mean, mean - half, mean + half)


def first_reach(curve: Curve, target: float) -> float | None:
    """First x where the curve is >= target, linear between grid points; None when it never gets there."""
    # a tolerance of a few ulps: the baseline's own curve ends exactly at its final reward, up to summation order
    above = np.nonzero(curve.mean >= target - 1e-12 * max(1.0, abs(target)))[0]
    if not len(above):
        return None
    i = int(above[0])
    if i == 0:
        return float(curve.x[0])
    x0, x1, y0, y1 = curve.x[i - 1], curve.x[i], curve.mean[i - 1], curve.mean[i]
    return float(x0 + (target - y0) / (y1 - y0) * (x1 - x0))


def per_step_costs(runs: list[RunData], warmup: int, band: str) -> dict[str, Stat]:
    """Mean seconds per step by phase (first ``warmup`` steps left out when the run has more) and transformer
    passes per step, each averaged per run, then over runs."""
    out = {}
    for key in (STEP_TIME, *PHASES, *COUNTS):
        per_run = []
        for run in runs:
            v = run.series(key)
            if key.startswith("time/") and len(v) > warmup:
                v = v[warmup:]
            v = v[np.isfinite(v)]
            per_run.append(float(v.mean()) if len(v) else math.nan)
        out[key] = spread(per_run, band)
    return out


def summarize_group(group: Group, s: Settings) -> GroupResult:
    traces = [make_trace(r, s.smooth) for r in group.runs]
    axes = [a for a in AXES if all(a in t.x for t in traces)]
    return GroupResult(
        label=group.label, runs=group.runs, traces=traces, steps=[len(t.reward) for t in traces],
        final=spread([t.final for t in traces], s.band),
        total={a: spread([t.total(a) for t in traces], s.band) for a in axes},
        per_step=per_step_costs(group.runs, s.warmup_steps, s.band),
        curves={a: seed_curve(traces, a, s.band) for a in axes})


def compare(groups: list[Group], baseline: Group, s: Settings) -> Comparison:
    if s.axis not in AXES:
        raise CompareError(f"--axis must be one of {', '.join(AXES)} (got {s.axis!r})")
    if s.band not in BANDS:
        raise CompareError(f"--band must be one of {', '.join(BANDS)} (got {s.band!r})")
    results = [summarize_group(g, s) for g in groups]
    lacking = [t.run.name for r in results for t in r.traces if s.axis not in t.x]
    if lacking:
        raise CompareError(f"{len(lacking)} run(s) did not log {AXES[s.axis]} on every step ({', '.join(lacking[:4])}"
                           f"{'...' if len(lacking) > 4 else ''}); compare on another axis, e.g. --axis step")
    off = axis_offset(s.axis)
    totals = {t.run.name: t.total(s.axis) for r in results for t in r.traces}
    budget = float(s.budget) if s.budget is not None else min(totals.values())
    base = next(r for r in results if r.label == baseline.label)
    target = base.final.mean
    for r in results:
        # each seed's curve at the budget (np.interp holds the final value past a run's end: see the notes)
        r.at_budget = spread([_at(t, s.axis, budget - off) for t in r.traces], s.band)
        curve = r.curves[s.axis]
        reach = first_reach(curve, target)
        r.reach = None if reach is None else reach + off
        r.best = float(curve.mean.max())
    base_reach = base.reach
    for r in results:
        r.speedup = base_reach / r.reach if (r.reach and base_reach) else None
    ended = sorted(n for n, total in totals.items() if total < budget)
    return Comparison(settings=s, groups=results, baseline=base.label, budget=budget, target=target,
                      budget_runs_ended_before=ended)


def _at(trace: Trace, axis: str, x: float) -> float:
    xs = trace.x[axis]
    if x < xs[0]:
        return math.nan           # the budget ends before this run's first logged step: no reward yet
    return float(np.interp(x, xs, trace.reward))
