"""The comparison as text: Markdown tables (``comparison.md``), every number at full precision (``comparison.json``).

Titles say what was measured: the metric's name, the smoothing window actually used (``last 2 steps`` for runs of
2 steps, whatever ``--smooth`` asked for), the confidence of the intervals; thin-evidence warnings come first."""

from __future__ import annotations

import math
from typing import Any

from launcher.compare import hacking, stats
from launcher.compare.aggregate import Comparison, GroupResult
from launcher.compare.metric import SMOOTH_TRAINING
from launcher.compare.runs import COUNTS, PHASES, STEP_TIME, axis_key, axis_label, axis_unit, show
from launcher.compare.stats import Estimate

NOT_REACHED = "not reached"
NO_ESTIMATE = "no estimate"  # a ratio whose interval is unbounded: no number is shown (issue 25)
BAND_NAMES = {"std": "± std over seeds", "sem": "± standard error over seeds", "minmax": "[min, max] over seeds"}


def num(v: float | None, digits: int = 4) -> str:
    """Significant digits for costs and compute amounts (GPU-hours on a CPU demo are tiny, on a cluster large)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if math.isinf(v):
        return "∞"
    return f"{v:.{digits}g}"


def rew(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "—"
    return f"{v:.4f}"


def pct(confidence: float) -> str:
    return f"{confidence * 100:g}%"


def with_interval(e: Estimate | None, fmt=rew, say_why: bool = True) -> str:
    """``mean [lo, hi]``; one seed: ``mean (1 seed)`` (just ``mean`` without ``say_why``)."""
    if e is None or e.n == 0:
        return "—"
    if not e.has_interval:
        return f"{fmt(e.mean)} ({e.n} seed{'s' * (e.n != 1)})" if say_why else fmt(e.mean)
    return f"{fmt(e.mean)} [{fmt(e.lo)}, {fmt(e.hi)}]"


def tested(e: Estimate | None, verdict: str | None, direction: str, fmt=rew) -> str:
    """A value with its interval and, for a group other than the baseline, the test against the baseline."""
    text = with_interval(e, fmt)
    if verdict is None or e is None or e.n == 0:
        return text
    if verdict == stats.SIGNIFICANT:
        return f"{text}, {direction}, significant"
    return f"{text}, {verdict}"


def unit(c: Comparison, axis: str | None = None) -> str:
    """The unit of ``axis`` (default: the compared one) for these runs: device-s on the CPU, GPU-h on GPUs."""
    return axis_unit(axis or c.settings.axis, c.device)


def window_title(c: Comparison) -> str:
    """``last 10 steps``, ``last 2 steps`` (runs shorter than the window), ``last evaluation``, ``last 2–10 steps``."""
    windows = sorted({t.window for r in c.groups for t in r.traces})
    point = c.metric.point
    if windows == [1]:
        return f"last {point}"
    shown = str(windows[0]) if len(windows) == 1 else f"{windows[0]}–{windows[-1]}"
    return f"last {shown} {point}s"


def curve_title(c: Comparison) -> str:
    """What a curve's point is: ``each evaluation``, or ``trailing mean of up to 2 steps`` (at most what runs have)."""
    widest = min(c.smooth, max(t.points for r in c.groups for t in r.traces))
    return f"each {c.metric.point}" if widest == 1 else f"trailing mean of up to {widest} {c.metric.point}s"


def _reach(r: GroupResult, c: Comparison) -> str:
    if r.reach is None:
        by = f" by {len(r.runs) - r.reached} of {len(r.runs)} seeds" if r.reached else ""
        return f"{NOT_REACHED}{by} (best {rew(r.best)})"
    return with_interval(r.reach, num)


def _speedup(r: GroupResult, c: Comparison) -> str:
    if r.label == c.baseline:
        return "1.00× (baseline)"
    if r.speedup is None:
        return "—"
    e = r.differences.get("reach")
    if e is not None and e.n < 2:
        return f"{r.speedup:.2f}× (no interval: {e.n} paired seed), {stats.UNTESTED}"
    if not stats.bounded(e):
        return f"{NO_ESTIMATE} (interval unbounded)"
    text = f"{r.speedup:.2f}× [{r.speedup_lo:.2f}, {r.speedup_hi:.2f}]"
    verdict = r.verdicts["reach"]
    if verdict == stats.SIGNIFICANT:
        return f"{text}, {'faster' if r.speedup > 1 else 'slower'}, significant"
    return f"{text}, {verdict}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def _span(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}–{hi}"


def outcome_table(c: Comparison) -> tuple[list[str], list[list[str]]]:
    s, u, key = c.settings, unit(c), c.metric.key
    held_out = c.metric.held_out
    header = [
        "group",
        "seeds",
        "steps",
        *(["evaluations"] if held_out else []),
        f"final {key} ({window_title(c)}), {pct(s.confidence)} interval",
        f"{key} at {num(c.budget)} {u}",
        f"{u} to reach {rew(c.target)}",
        f"speedup vs {c.baseline}",
        f"total {u}",
    ]
    rows = []
    for r in c.groups:
        base = r.label == c.baseline

        def test(key_: str, e, direction, base=base, r=r):
            return tested(e, None if base else r.verdicts[key_], direction)

        at_budget, base_at_budget = r.at_budget, _base(c).at_budget
        assert at_budget is not None and base_at_budget is not None  # compare() sets it on every group

        rows.append(
            [
                r.label,
                str(len(r.runs)),
                _span(r.steps),
                *([_span(r.points)] if held_out else []),
                test("final", r.final, "higher" if r.final.mean > _base(c).final.mean else "lower"),
                test("at_budget", at_budget, "higher" if at_budget.mean > base_at_budget.mean else "lower"),
                _reach(r, c),
                _speedup(r, c),
                with_interval(r.total[s.axis], num),
            ]
        )
    return header, rows


def _base(c: Comparison) -> GroupResult:
    return next(r for r in c.groups if r.label == c.baseline)


def cost_table(c: Comparison) -> tuple[list[str], list[list[str]]]:
    header = [
        "group",
        "s / step",
        "rollout s",
        "reward s",
        "update s",
        "transformer fwd / step",
        "transformer bwd / step",
        "total wall-clock s",
        f"total {unit(c, 'gpu_hours')}",
    ]
    rows = []
    for r in c.groups:
        p = r.per_step
        # the interval of s/step says how steady the timing is; phase means are enough to see where time goes
        rows.append(
            [
                r.label,
                with_interval(p[STEP_TIME], num, False),
                *(num(p[k].mean) for k in (*PHASES, *COUNTS)),
                *(with_interval(r.total.get(a), num, False) for a in ("wallclock_s", "gpu_hours")),
            ]
        )
    return header, rows


def runs_table(c: Comparison) -> tuple[list[str], list[list[str]]]:
    u = unit(c)
    header = [
        "group",
        "seed",
        "run",
        "steps",
        *(["evaluations"] if c.metric.held_out else []),
        f"final {c.metric.key}",
        f"total {u}",
        "source",
    ]
    rows = []
    for r in c.groups:
        for t in sorted(r.traces, key=lambda t: show(t.run.seed)):
            total = t.total(c.settings.axis) if c.settings.axis in t.x else None
            rows.append(
                [
                    r.label,
                    show(t.run.seed),
                    t.run.name,
                    str(t.steps),
                    *([str(t.points)] if c.metric.held_out else []),
                    f"{rew(t.final)} (last {t.window})",
                    num(total),
                    t.run.source,
                ]
            )
    return header, rows


def markdown(
    c: Comparison,
    context: dict[str, str],
    sources: list[str],
    figures: dict[str, str],
    title: str = "Method comparison",
) -> str:
    s = c.settings
    n_runs = sum(len(r.runs) for r in c.groups)
    band = (
        f"the curves' bands are {pct(s.confidence)} intervals of the mean"
        if s.band == "ci"
        else f"the curves' bands are {BAND_NAMES[s.band]}"
    )
    lines = [
        f"# {title}",
        "",
        f"{n_runs} runs in {len(c.groups)} groups from {', '.join(sources)}. "
        f"Model `{context['model.name']}`, reward `{context['reward.name']}`, prompts `{context['data.name']}`. "
        f"Compute axis: {axis_label(s.axis, c.device)} (`{axis_key(s.axis, c.metric.key)}`); figures over seeds are means with "
        f"{pct(s.confidence)} intervals [low, high] ({stats.METHOD}; times, compute and ratios on the log scale); "
        f"{band}.",
        "",
        f"Metric: {c.metric.how_chosen}",
        "",
    ]
    if c.warnings:
        lines += ["## Read this first: thin evidence", ""] + [f"- **{w.kind}**: {w.message}" for w in c.warnings]
        lines += [""]
    lines += ["## Outcome at equal compute", ""]
    lines += _table(*outcome_table(c))
    lines += ["", "## Cost per step", ""]
    lines += _table(*cost_table(c))
    if c.hacking:
        lines += ["", "## Training reward against held-out scores", ""]
        lines += [
            f"Each score's change over the run (training reward: its last {SMOOTH_TRAINING} logged steps' mean minus "
            f"its first {SMOOTH_TRAINING}; "
            f"held-out: the last evaluation minus the first), mean over seeds with its {pct(s.confidence)} interval. "
            "*hacking?* says *yes* when the training reward rose and a held-out score fell, both intervals away "
            "from 0.",
            "",
        ]
        lines += _table(*hacking.table(c.hacking))
    lines += ["", "## How the numbers are computed", ""] + [f"- {n}" for n in notes(c)]
    if figures:
        lines += ["", "## Figures", ""] + [f"![{name}]({path})" for name, path in figures.items()]
    lines += ["", "## Runs", ""]
    lines += _table(*runs_table(c))
    return "\n".join(lines) + "\n"


def notes(c: Comparison) -> list[str]:
    s, u, m = c.settings, unit(c), c.metric
    conf = pct(s.confidence)
    smoothing = (
        f"Curves are `{m.key}` at each logged {m.point} (no smoothing)"
        if c.smooth == 1
        else f"Curves are `{m.key}` smoothed by a trailing mean over the last {c.smooth} logged {m.point}s "
        f"(fewer at a run's start and in runs with fewer points: the column titles give the window used)"
    )
    out = [
        f"{smoothing}; a run's final value is that curve's last value. Points without a value (skipped updates"
        f"{', steps without an evaluation' if m.held_out else ''}) are left out.",
        f"Over seeds, each figure is the mean with a {conf} interval by {stats.METHOD} (mean ± t·s/√n, s the "
        f"sample std, t from scipy.stats); times, compute amounts and speedups are positive, so their interval is "
        f"the t interval of the logs, exponentiated, around the geometric mean (never an end at or below 0). One "
        f"seed has no interval.",
        f"Test against the baseline `{c.baseline}`, seed by seed (the same seed gives both the same prompts and "
        f"first noise): the t test of the per-seed differences (of the log-ratios for compute to reach), its "
        f"p-value Holm-corrected over the {len(c.groups) - 1} group(s) compared with the baseline; *significant* "
        f"when the adjusted p < {1 - s.confidence:.2g}, *untested* with fewer than 2 paired seeds. *Not "
        f"significant* means not shown, not equal.",
        "Group curves: seeds that logged the same steps are averaged step by step, at the seeds' mean compute for "
        "that step; otherwise each seed's curve is linearly interpolated onto the union of the seeds' logged "
        "x-values and a seed that has ended keeps its final value.",
        f"Value at {num(c.budget)} {u}: each seed's curve at that budget. "
        + (
            "The budget was given with --budget."
            if s.budget is not None
            else "The budget is the smallest total compute of any run compared, so every run reached it."
        ),
        f"{u} to reach {rew(c.target)} ("
        + (
            s.target_from
            if s.target is not None
            else f"the lowest final value among the seeds of the baseline `{c.baseline}`, which every one of its seeds "
            f"reached"
        )
        + f"): per seed, the first point where its curve reaches it (linear between logged points), then the "
        f"geometric mean over seeds; `{NOT_REACHED} by k of n seeds` when some seeds never got there (with the best "
        f"value of the group's mean curve). Speedup = the baseline's {u} to reach it / the group's, seed by seed "
        f"(> 1: fewer {u} for the same value), with the t interval of the log-ratios; `{NO_ESTIMATE}` when that "
        f"interval is unbounded.",
        f"Per-step timings are means over steps (the first {s.warmup_steps} left out as warm-up), then over seeds; "
        f"transformer passes are counted per sample on the model (a batch of B rows counts B).",
    ]
    if s.margin is not None:
        out.append(
            f"Margin {s.margin:g} (protocol.margin, fixed in every run's config before the runs): the smallest "
            f"difference that matters; scripts/protocol.py ranks two methods only when their difference is "
            f"significant and at least this large."
        )
    if s.axis == "step":
        out.append("On the step axis, compute is the number of steps done (last logged step + 1).")
    if c.incomplete:
        how = "compared anyway (--include-unfinished)" if s.include_unfinished else "left out of every figure"
        out.append(f"Runs not finished, {how}: {'; '.join(i.describe() for i in c.incomplete)}.")
    if c.budget_runs_ended_before:
        out.append(
            f"Runs that ended before the budget count with their final value: {', '.join(c.budget_runs_ended_before)}."
        )
    return out


def _est(e: Estimate | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "mean": _f(e.mean),
        "lo": _f(e.lo),
        "hi": _f(e.hi),
        "n": e.n,
        "interval": e.method,
        "p": _f(e.p),
        "std": _f(e.std),
        "values": [_f(v) for v in e.values],
    }


def _f(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return "inf" if isinstance(v, float) and math.isinf(v) else v


def to_json(c: Comparison, context: dict[str, str], sources: list[str], figures: dict[str, str]) -> dict[str, Any]:
    s, th = c.settings, c.settings.thresholds
    return {
        "settings": {
            "axis": s.axis,
            "axis_metric": axis_key(s.axis, c.metric.key),
            "smooth": c.smooth,
            "smooth_given": s.smooth,
            "band": s.band,
            "warmup_steps": s.warmup_steps,
            "budget_given": s.budget,
            "target_given": s.target,
            "target_from": s.target_from if s.target is not None else None,
            "margin": s.margin,
            "confidence": s.confidence,
            "interval": stats.METHOD,
            "include_unfinished": s.include_unfinished,
            "min_seeds": th.min_seeds,
            "min_points": th.min_points,
            "max_step_cv": th.max_step_cv,
        },
        "metric": {"key": c.metric.key, "held_out": c.metric.held_out, "how_chosen": c.metric.how_chosen},
        "warnings": [{"kind": w.kind, "message": w.message} for w in c.warnings],
        "hacking": [
            {"group": h.label, "train": _est(h.train), "held_out": {k: _est(e) for k, e in h.held_out.items()}}
            for h in c.hacking
        ],
        "context": context,
        "sources": sources,
        "figures": figures,
        "device": c.device,
        "axis_unit": unit(c),
        "incomplete": [{"name": i.run.name, "source": i.run.source, "reason": i.reason} for i in c.incomplete],
        "baseline": c.baseline,
        "budget": c.budget,
        "target": c.target,
        "groups": [
            {
                "label": r.label,
                "seeds": len(r.runs),
                "steps": r.steps,
                "points": r.points,
                "final": _est(r.final),
                "at_budget": _est(r.at_budget),
                "reach": _est(r.reach),
                "reached": r.reached,
                "reached_at_first": r.reached_at_first,
                "best": _f(r.best),
                "speedup": _f(r.speedup),
                "speedup_interval": [_f(r.speedup_lo), _f(r.speedup_hi)],
                "verdicts": None if r.label == c.baseline else r.verdicts,
                "differences": None if r.label == c.baseline else {k: _est(v) for k, v in r.differences.items()},
                "total": {a: _est(v) for a, v in r.total.items()},
                "per_step": {k: _est(v) for k, v in r.per_step.items()},
                "runs": [
                    {
                        "id": t.run.run_id,
                        "name": t.run.name,
                        "source": t.run.source,
                        "seed": t.run.seed,
                        "group": t.run.group,
                        "steps": t.steps,
                        "points": t.points,
                        "window": t.window,
                        "final": t.final,
                        "total": {a: t.total(a) for a in t.x},
                        "x": {a: [float(v) for v in t.x[a]] for a in t.x},  # where each compared point sits
                    }
                    for t in r.traces
                ],
            }
            for r in c.groups
        ],
    }
