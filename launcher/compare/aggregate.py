"""The numbers of a comparison: seed curves on a common grid, the final value, per-step cost, the value reached at
a common compute budget, and the compute each group needs to reach a target; every figure over seeds is a mean with
a confidence interval (:mod:`.stats`), and each group is tested against the baseline.

Definitions (also printed under the report's tables; ``docs/compare_report.md`` explains them with examples):

- The metric is ``eval/<reward>/mean`` when the runs have it, else the training reward ``reward/mean``
  (:mod:`.metric`). A run's curve is the metric smoothed by a trailing mean over the last ``smooth`` logged points
  (fewer at the start, and in runs shorter than the window); its final value is the curve's last value.
- A group's curve is the mean over its seeds of their curves on a common grid: the steps when the seeds logged
  the same steps (x = the seeds' mean compute at each step), else the union of the seeds' logged x-values with each
  seed linearly interpolated (a seed that has ended keeps its final value). The band is the pointwise interval of
  that mean (``ci``), or the spread over seeds (std with ddof=1, standard error, or min-max).
- Compute of a run on the chosen axis: ``time/gpu_hours`` (devices x wall-clock; shown as device-seconds when the
  runs ran on the CPU, :func:`.runs.axis_unit`) or ``time/wallclock_s`` at its last logged step, or the number of
  steps done (last step + 1). Times and compute amounts are positive: their intervals are on the log scale.
- Runs that did not finish (last step below ``trainer.steps``, crashed, still running) are left out before any of
  this unless ``--include-unfinished`` (:mod:`.completeness`); the report names them.
- Common budget: the smallest total compute of any run compared (every run reached it); value at the budget is
  each seed's curve there.
- Target: ``--target``, else the lowest final value among the baseline's seeds (so every baseline seed reaches it).
  Compute to reach it: per seed, the first x at which the seed's curve reaches it (linear between logged points);
  the group's is the geometric mean over seeds when every seed got there. Speedup = the baseline's compute to
  reach it / the group's, seed by seed, its t interval on the log scale.
- Final value, value at the budget and compute to reach are each compared with the baseline's seed by seed (the
  t test of the per-seed differences, of the log-ratios for compute), Holm-corrected over the groups: significant
  when the adjusted p-value is below 1 - confidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from launcher.compare import evidence, hacking, stats
from launcher.compare.completeness import Incomplete
from launcher.compare.errors import CompareError
from launcher.compare.grouping import Group
from launcher.compare.hacking import ScoreChanges
from launcher.compare.metric import Metric
from launcher.compare.runs import AXES, COUNTS, PHASES, REWARD, STEP_TIME, RunData, axis_key, axis_scale, is_evaluation
from launcher.compare.stats import Estimate

BANDS = ("ci", "std", "sem", "minmax")


@dataclass
class Settings:
    axis: str = "gpu_hours"  # compute axis for budget and speedup: step | wallclock_s | gpu_hours
    smooth: int | None = None  # trailing window (logged points); None = the metric's default
    band: str = "ci"  # the curves' band: the interval of the mean, or a spread over seeds
    warmup_steps: int = 1  # first steps left out of the per-step timings (lazy init, allocator warm-up)
    budget: float | None = None  # common budget in axis units; None = the smallest total among the runs
    target: float | None = None  # None = the lowest final value among the baseline's seeds
    target_from: str = (
        "given with --target"  # where a given target came from, for the report (launcher/compare/protocol.py)
    )
    margin: float | None = None  # protocol.margin of the runs, reported (the protocol's driver ranks with it)
    confidence: float = stats.CONFIDENCE
    include_unfinished: bool = False  # unfinished, crashed and running runs count (completeness.py)
    thresholds: evidence.Thresholds = field(default_factory=evidence.Thresholds)


@dataclass
class Trace:
    """One run's curve of the compared metric on each axis, points without a value (skipped updates, steps without
    an evaluation) left out."""

    run: RunData
    x: dict[str, np.ndarray]  # axis -> raw logged x (step, time/wallclock_s, time/gpu_hours) at each point
    reward: np.ndarray  # the metric, smoothed
    raw_reward: np.ndarray
    smooth: int  # the window asked for; the last value averages min(smooth, points) points
    steps: int  # training steps logged (rows with reward/mean)
    held_out: bool = False  # an evaluation's curve: x is the compute before each point (axis_offset)

    @property
    def final(self) -> float:
        return float(self.reward[-1])

    @property
    def points(self) -> int:
        return len(self.reward)

    @property
    def window(self) -> int:
        """How many logged points the final value averages."""
        return min(self.smooth, self.points)

    def total(self, axis: str) -> float:
        return float(self.x[axis][-1]) + axis_offset(axis, self.held_out)


@dataclass
class Curve:
    x: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


@dataclass
class GroupResult:
    label: str
    runs: list[RunData]
    traces: list[Trace]
    final: Estimate
    total: dict[str, Estimate]  # axis -> total compute per run
    per_step: dict[str, Estimate]  # time/step_s, time/<phase>_s, count/transformer_* -> per-step mean
    curves: dict[str, Curve]  # axis -> seed-mean curve
    at_budget: Estimate | None = None
    reach: Estimate | None = None  # compute (axis units) to reach the target; None = a seed did not
    reached: int = 0  # seeds that reached the target
    reached_at_first: int = 0  # seeds already at the target at their first logged point
    best: float = math.nan  # highest value of the mean curve (what "not reached" stopped at)
    speedup: float | None = None
    speedup_lo: float = math.nan
    speedup_hi: float = math.nan
    verdicts: dict[str, str] = field(default_factory=dict)  # final | at_budget | reach -> vs the baseline
    differences: dict[str, Estimate | None] = field(default_factory=dict)  # the paired estimates behind them
    reach_by_seed: dict = field(default_factory=dict)  # seed -> compute to reach the target

    @property
    def steps(self) -> list[int]:
        return [t.steps for t in self.traces]

    @property
    def points(self) -> list[int]:
        return [t.points for t in self.traces]


@dataclass
class Comparison:
    settings: Settings
    metric: Metric
    smooth: int  # the window used (settings.smooth or the metric's default)
    groups: list[GroupResult]
    baseline: str
    budget: float
    target: float
    budget_runs_ended_before: list[str] = field(default_factory=list)
    device: str | None = None  # cpu / cuda when every run says so (runs.py labels the gpu_hours axis by it)
    incomplete: list[Incomplete] = field(default_factory=list)  # named in the report; compared only if included
    warnings: list[evidence.Finding] = field(default_factory=list)
    # the training reward against every held-out score, per group (empty without held-out scores): hacking.py
    hacking: list[ScoreChanges] = field(default_factory=list)


def axis_offset(axis: str, held_out: bool = False) -> float:
    """Steps are logged 0-based; as compute the step axis counts steps done: a training row of step k comes after
    k + 1 steps, an evaluation logged at step k measures the model after k steps (held out: no offset)."""
    return 1.0 if axis == "step" and not held_out else 0.0


def trailing_mean(y: np.ndarray, k: int) -> np.ndarray:
    k = max(int(k), 1)
    c = np.concatenate([[0.0], np.cumsum(y)])
    idx = np.arange(1, len(y) + 1)
    lo = np.maximum(idx - k, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def make_trace(run: RunData, smooth: int, key: str = REWARD, axes=tuple(AXES), device: str | None = None) -> Trace:
    values = run.series(key)
    keep = np.isfinite(values)
    if not keep.any():
        raise CompareError(f"run {run.name} ({run.source}) logged no {key}")
    x = {}
    for axis in axes:
        xs = run.series(axis_key(axis, key))[keep]
        if len(xs) and np.isfinite(xs).all():
            # cumulative axes never go down; if a resumed run restarted its clock, keep the curve drawable
            x[axis] = np.maximum.accumulate(xs) * axis_scale(axis, device)
    steps = int(np.isfinite(run.series(REWARD)).sum())
    return Trace(
        run=run,
        x=x,
        reward=trailing_mean(values[keep], smooth),
        raw_reward=values[keep],
        smooth=smooth,
        steps=steps,
        held_out=is_evaluation(key),
    )


def spread_band(ys: np.ndarray, band: str) -> tuple[np.ndarray, np.ndarray]:
    """The std / sem / min-max band over seeds (rows of ``ys``)."""
    mean = ys.mean(axis=0)
    if band == "minmax":
        return ys.min(axis=0), ys.max(axis=0)
    half = ys.std(axis=0, ddof=1) if len(ys) > 1 else np.zeros_like(mean)
    if band == "sem" and len(ys) > 1:
        half = half / math.sqrt(len(ys))
    return mean - half, mean + half


def seed_curve(traces: list[Trace], axis: str, band: str, confidence: float = stats.CONFIDENCE) -> Curve:
    """Mean and band over seeds on a common grid.

    Seeds that logged the same steps (the usual case) share the step grid: at each step, the mean of their values
    at the mean of their compute. Their compute per step differs only by machine noise, and this way the group
    reaches its own final value exactly at its mean total compute. Otherwise (different lengths, skipped steps)
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
    if band == "ci":
        lo, hi = stats.curve_interval(ys, confidence)
    else:
        lo, hi = spread_band(ys, band)
    return Curve(grid, ys.mean(axis=0), lo, hi)


def first_reach(x: np.ndarray, y: np.ndarray, target: float) -> float | None:
    """First x where the curve ``y(x)`` is >= target, linear between points; None when it never gets there."""
    # a tolerance of a few ulps: a curve that ends exactly at the target, up to summation order, reaches it
    above = np.nonzero(y >= target - 1e-12 * max(1.0, abs(target)))[0]
    if not len(above):
        return None
    i = int(above[0])
    if i == 0:
        return float(x[0])
    x0, x1, y0, y1 = x[i - 1], x[i], y[i - 1], y[i]
    return float(x0 + (target - y0) / (y1 - y0) * (x1 - x0))


def per_step_costs(runs: list[RunData], warmup: int, confidence: float) -> dict[str, Estimate]:
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
        out[key] = positive_estimate(per_run, confidence)
    return out


def summarize_group(group: Group, metric: Metric, smooth: int, s: Settings, device: str | None = None) -> GroupResult:
    traces = [make_trace(r, smooth, metric.key, device=device) for r in group.runs]
    axes = [a for a in AXES if all(a in t.x for t in traces)]
    est = lambda values: stats.estimate(values, s.confidence)  # noqa: E731
    return GroupResult(
        label=group.label,
        runs=group.runs,
        traces=traces,
        final=est([t.final for t in traces]),
        total={a: positive_estimate([t.total(a) for t in traces], s.confidence) for a in axes},
        per_step=per_step_costs(group.runs, s.warmup_steps, s.confidence),
        curves={a: seed_curve(traces, a, s.band, s.confidence) for a in axes},
    )


def common_device(groups: list[Group], axis: str) -> str | None:
    """The device every run computed on (``cpu``/``cuda``), None when unknown or mixed; mixed devices on the
    ``gpu_hours`` axis are refused: it would add GPU-hours to CPU process-hours."""
    devices = {r.device for g in groups for r in g.runs}
    if axis == "gpu_hours" and len(devices) > 1:
        shown = ", ".join(sorted(str(d) if d else "not recorded" for d in devices))
        raise CompareError(
            f"the runs computed on different devices ({shown}): time/gpu_hours counts GPUs for some and CPU "
            f"processes for others. Compare on --axis step or --axis wallclock_s, or runs of one device"
        )
    return devices.pop() if len(devices) == 1 else None


def compare(
    groups: list[Group], baseline: Group, s: Settings, metric: Metric, incomplete: list[Incomplete] | None = None
) -> Comparison:
    if s.axis not in AXES:
        raise CompareError(f"--axis must be one of {', '.join(AXES)} (got {s.axis!r})")
    if s.band not in BANDS:
        raise CompareError(f"--band must be one of {', '.join(BANDS)} (got {s.band!r})")
    if not 0.5 < s.confidence < 1.0:
        raise CompareError(f"--confidence must be between 0.5 and 1, e.g. 0.95 (got {s.confidence})")
    smooth = metric.default_smooth if s.smooth is None else s.smooth
    th = s.thresholds
    if smooth < 1 or s.warmup_steps < 0 or th.min_seeds < 1 or th.min_points < 1 or th.max_step_cv < 0:
        raise CompareError("--smooth, --min-seeds and --min-points must be >= 1, --warmup-steps and --max-step-cv >= 0")
    device = common_device(groups, s.axis)
    results = [summarize_group(g, metric, smooth, s, device) for g in groups]
    lacking = [t.run.name for r in results for t in r.traces if s.axis not in t.x]
    if lacking:
        raise CompareError(
            f"{len(lacking)} run(s) did not log {axis_key(s.axis, metric.key)} with every {metric.key} "
            f"({', '.join(lacking[:4])}{'...' if len(lacking) > 4 else ''}); compare on another axis, "
            f"e.g. --axis step"
        )
    off = axis_offset(s.axis, metric.held_out)
    totals = {t.run.name: t.total(s.axis) for r in results for t in r.traces}
    budget = float(s.budget) if s.budget is not None else min(totals.values())
    base = next(r for r in results if r.label == baseline.label)
    target = float(s.target) if s.target is not None else min(t.final for t in base.traces)
    est = lambda values: stats.estimate(values, s.confidence)  # noqa: E731
    for r in results:
        # each seed's curve at the budget (np.interp holds the final value past a run's end: see the notes)
        r.at_budget = est([_at(t, s.axis, budget - off) for t in r.traces])
        reach = [first_reach(t.x[s.axis], t.reward, target) for t in r.traces]
        r.reached = sum(v is not None for v in reach)
        r.reached_at_first = sum(bool(v is not None and v <= t.x[s.axis][0]) for v, t in zip(reach, r.traces))
        r.reach_by_seed = {t.run.seed: v + off for v, t in zip(reach, r.traces) if v is not None}
        r.reach = positive_estimate(list(r.reach_by_seed.values()), s.confidence) if r.reached == len(reach) else None
        r.best = float(r.curves[s.axis].mean.max())
    paired_verdicts(results, base, s, budget - off)
    ended = sorted(n for n, total in totals.items() if total < budget)
    c = Comparison(
        settings=s,
        metric=metric,
        smooth=smooth,
        groups=results,
        baseline=base.label,
        budget=budget,
        target=target,
        budget_runs_ended_before=ended,
        device=device,
        incomplete=list(incomplete or []),
    )
    c.hacking = hacking.all_changes(results, s.confidence)
    c.warnings = evidence.check(c, s.thresholds)
    return c


def positive_estimate(values: list[float], confidence: float) -> Estimate:
    """A time or compute amount over seeds: its interval on the log scale (stats.estimate); a value of exactly 0 (a
    phase that took no time, a target met at compute 0) has no logarithm, and then the plain t interval is cut at 0."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if finite and min(finite) > 0:
        return stats.estimate(finite, confidence, positive=True)
    e = stats.estimate(finite, confidence)
    return replace(e, lo=max(e.lo, 0.0)) if e.has_interval else e


def paired_verdicts(results: list[GroupResult], base: GroupResult, s: Settings, budget_x: float) -> None:
    """Each group against the baseline, seed by seed (the same seed gives both the same prompts and first noise):
    final value and value at the budget by the per-seed difference, compute to reach by the per-seed ratio (the
    speedup); Holm's correction over the groups for each of the three (stats.py)."""
    others = [r for r in results if r is not base]

    def by_seed(r: GroupResult, value) -> dict:
        return {t.run.seed: value(t) for t in r.traces}

    tests: dict[str, list[Estimate | None]] = {
        "final": [stats.paired(by_seed(r, _final), by_seed(base, _final), s.confidence) for r in others],
        "at_budget": [
            stats.paired(by_seed(r, _budget(s.axis, budget_x)), by_seed(base, _budget(s.axis, budget_x)), s.confidence)
            for r in others
        ],
        "reach": [
            stats.paired(base.reach_by_seed, r.reach_by_seed, s.confidence, ratio=True)
            if r.reach is not None and base.reach is not None
            else None
            for r in others
        ],
    }
    for key, estimates in tests.items():
        adjusted = stats.holm([e.p if e is not None else math.nan for e in estimates])
        for r, e, p in zip(others, estimates, adjusted):
            r.verdicts[key] = stats.verdict(p, s.confidence)
            r.differences[key] = e
    for r in others:
        e = r.differences["reach"]
        if e is not None and e.n:
            r.speedup = e.mean
            r.speedup_lo, r.speedup_hi = (e.lo, e.hi) if e.has_interval else (math.nan, math.nan)


def _final(t: Trace) -> float:
    return t.final


def _budget(axis: str, x: float):
    return lambda t: _at(t, axis, x)


def _at(trace: Trace, axis: str, x: float) -> float:
    xs = trace.x[axis]
    if x < xs[0]:
        return math.nan  # the budget ends before this run's first logged point: no value yet
    return float(np.interp(x, xs, trace.reward))
