"""The comparison protocol's statistics (docs/comparing.md#comparison-protocol): each method's learning rate picked
on the validation prompts, its held-out score reported at that rate, and every pair of methods tested.

Input: one :class:`Run` per training run, its evaluations as :class:`Point` s (the compute spent before each: the
transformer passes, forwards + backwards, and device-seconds; the validation and held-out scores). Everything is
read at the *common budget*: the smallest total of transformer passes of any run, so every method is judged at the
same compute, not the same step count (a DanceGRPO step costs several Flow-GRPO-Fast steps). A run's score at the
budget is linear between its evaluations, as in ``rewardflow-compare``.

1. Selection: for each method, the rate whose validation score at the budget, averaged over seeds, is highest.
2. Report: the held-out scores of that rate's seeds, a mean with a Student t interval
   (:func:`launcher.compare.stats.estimate`), and for every pair of methods the difference paired by seed
   (:func:`launcher.compare.stats.paired`), Holm-corrected over all pairs. A pair is ranked only when its difference is
   significant and at least ``protocol.margin``; with no ranked pair the summary says "cannot rank".
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from launcher.compare import stats
from launcher.compare.aggregate import first_reach

CANNOT_RANK = "cannot rank"


@dataclass(frozen=True)
class Point:
    """One evaluation of a run: the compute before it and its two scores."""

    passes: float  # transformer forwards + backwards of the training steps before it
    device_s: float  # device-seconds of those steps (ranks x wall-clock; time/eval_gpu_hours x 3600)
    val: float  # validation score (val/<reward>/mean): training prompts
    test: float  # held-out score (eval/<reward>/mean)


@dataclass
class Run:
    method: str
    lr_scale: float
    seed: int
    points: list[Point] = field(default_factory=list)
    source: str = ""

    def at(self, passes: float, key: str) -> float:
        """Score ``key`` (``val`` or ``test``) at ``passes`` transformer passes, linear between evaluations."""
        xs = [p.passes for p in self.points]
        return float(np.interp(passes, xs, [getattr(p, key) for p in self.points]))

    @property
    def total_passes(self) -> float:
        return self.points[-1].passes


def common_budget(runs: list[Run]) -> float:
    """The smallest total of transformer passes of any run: every run reached it."""
    return min(r.total_passes for r in runs)


def select(runs: list[Run], margin: float | None, target: float | None, baseline: str | None = None) -> dict:
    """The protocol's result as JSON-ready data (see the module docstring); ``baseline`` only orders the table."""
    if not runs:
        raise ValueError("no runs to select from")
    budget = common_budget(runs)
    by = {}
    for r in runs:
        by.setdefault(r.method, {}).setdefault(r.lr_scale, []).append(r)
    methods = sorted(by, key=lambda m: (m != baseline, m))
    out = {"budget_passes": budget, "margin": margin, "target": target, "methods": {}}
    chosen: dict[str, dict[int, float]] = {}
    for m in methods:
        grid = {}
        for scale, rs in sorted(by[m].items()):
            grid[scale] = {
                "val": _est(stats.estimate([r.at(budget, "val") for r in rs])),
                "test": _est(stats.estimate([r.at(budget, "test") for r in rs])),
                "seeds": sorted(r.seed for r in rs),
            }
        best = max(grid, key=lambda s: grid[s]["val"]["mean"])
        picked = sorted(by[m][best], key=lambda r: r.seed)
        chosen[m] = {r.seed: r.at(budget, "test") for r in picked}
        reach = [first_reach(_xs(r), _ys(r), target) if target is not None else None for r in picked]
        reached = [x for x in reach if x is not None and x > 0]
        out["methods"][m] = {
            "grid": {f"{s:g}": g for s, g in grid.items()},
            "best_lr_scale": best,
            "test_at_budget": _est(stats.estimate(list(chosen[m].values()))),
            "test_final": _est(stats.estimate([r.points[-1].test for r in picked])),
            "total_passes": _est(stats.estimate([r.total_passes for r in picked], positive=True)),
            "total_device_s": _est(stats.estimate([r.points[-1].device_s for r in picked], positive=True)),
            "passes_to_target": _est(stats.estimate(reached, positive=True)) if reached else None,
            "reached_target": f"{sum(x is not None for x in reach)} of {len(picked)}" if target is not None else None,
        }
    pairs = list(itertools.combinations(methods, 2))
    diffs = [stats.paired(chosen[a], chosen[b]) for a, b in pairs]
    adjusted = stats.holm([d.p for d in diffs])
    out["pairs"] = []
    for (a, b), d, p in zip(pairs, diffs, adjusted):
        significant = stats.verdict(p) == stats.SIGNIFICANT
        large = margin is None or abs(d.mean) >= margin
        out["pairs"].append(
            {
                "a": a,
                "b": b,
                "difference": _est(d),
                "p": d.p,
                "p_holm": p,
                "verdict": stats.verdict(p),
                "ranked": bool(significant and large),
                "order": (f"{a} > {b}" if d.mean > 0 else f"{b} > {a}") if significant and large else None,
            }
        )
    ranked = [p["order"] for p in out["pairs"] if p["ranked"]]
    out["verdict"] = "ranks " + "; ".join(ranked) if ranked else CANNOT_RANK
    return out


def summary(result: dict) -> list[str]:
    """The verdict in words: "cannot rank" when no pair of methods differs significantly by at least the margin."""
    margin = result["margin"]
    beyond = f" and by at least the margin {margin:g}" if margin is not None else ""
    if result["verdict"] == CANNOT_RANK:
        return [
            f"**Cannot rank the methods**: no held-out difference between two methods, paired by seed, is significant "
            f"after Holm's correction over the {len(result['pairs'])} pairs{beyond}. Not significant means not shown, "
            f"not equal."
        ]
    orders = [p["order"] for p in result["pairs"] if p["ranked"]]
    rest = sum(not p["ranked"] for p in result["pairs"])
    return [
        f"**Ranked** (significant after Holm's correction{beyond}): {'; '.join(orders)}. The other {rest} pair(s) "
        f"cannot be ranked."
    ]


def markdown(result: dict, header: list[str]) -> str:
    """The protocol's page: ``header`` (title, command, settings), the summary, then the tables."""
    lines = [*header, "", *summary(result), ""]
    lines += [
        f"Every score is read at the common budget of {result['budget_passes']:.0f} transformer passes (forwards + "
        f"backwards; the smallest total of any run). Means over seeds with 95 % Student t intervals.",
        "",
        "| method | best lr_scale (validation) | held-out at the budget | held-out final | passes | device-s | "
        "passes to target | validation by lr_scale |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m, r in result["methods"].items():
        grid = ", ".join(f"{s}: {_fmt(g['val'])}" for s, g in r["grid"].items())
        reach = _fmt(r["passes_to_target"], "g") if r["passes_to_target"] else "not reached"
        if r["reached_target"] is not None:
            reach += f" ({r['reached_target']} seeds)"
        lines.append(
            f"| {m} | {r['best_lr_scale']:g} | {_fmt(r['test_at_budget'])} | {_fmt(r['test_final'])} | "
            f"{_fmt(r['total_passes'], 'g')} | {_fmt(r['total_device_s'], 'g')} | {reach} | {grid} |"
        )
    lines += ["", "| pair (a - b) | difference | p | p (Holm) | verdict |", "| --- | --- | --- | --- | --- |"]
    for p in result["pairs"]:
        lines.append(
            f"| {p['a']} - {p['b']} | {_fmt(p['difference'])} | {p['p']:.3g} | {p['p_holm']:.3g} | {p['verdict']}"
            f"{'' if p['ranked'] or p['verdict'] != stats.SIGNIFICANT else ', below the margin'} |"
        )
    return "\n".join(lines) + "\n"


def _xs(r: Run) -> np.ndarray:
    return np.array([p.passes for p in r.points])


def _ys(r: Run) -> np.ndarray:
    return np.array([p.test for p in r.points])


def _est(e: stats.Estimate) -> dict:
    return {"mean": e.mean, "lo": e.lo, "hi": e.hi, "n": e.n, "interval": e.method, "values": list(e.values)}


def _fmt(e: dict | None, spec: str = ".4f") -> str:
    if e is None or not math.isfinite(e["mean"]):
        return "n/a"
    if not (math.isfinite(e["lo"]) and math.isfinite(e["hi"])):
        return f"{e['mean']:{spec}}"
    return f"{e['mean']:{spec}} [{e['lo']:{spec}}, {e['hi']:{spec}}]"
