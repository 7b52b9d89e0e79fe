"""The comparison as text: Markdown tables (``comparison.md``), every number at full precision (``comparison.json``)."""
from __future__ import annotations

import math
from typing import Any

from launcher.compare.aggregate import Comparison, GroupResult, Stat
from launcher.compare.runs import AXES, AXIS_LABELS, COUNTS, PHASES, STEP_TIME, show

NOT_REACHED = "not reached"
BAND_NAMES = {"std": "± std over seeds", "sem": "± standard error over seeds", "minmax": "[min, max] over seeds"}


def num(v: float | None, digits: int = 4) -> str:
    """Significant digits for costs and compute amounts (GPU-hours on a CPU demo are tiny, on a cluster large)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:.{digits}g}"


def rew(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "—"
    return f"{v:.4f}"


def with_spread(s: Stat | None, fmt=rew, band: str = "std") -> str:
    if s is None or s.n == 0:
        return "—"
    if s.n == 1:
        return fmt(s.mean)
    if band == "minmax":
        return f"{fmt(s.mean)} [{fmt(s.lo)}, {fmt(s.hi)}]"
    return f"{fmt(s.mean)} ± {fmt(s.spread)}"


def unit(axis: str) -> str:
    return {"step": "steps", "wallclock_s": "wall-clock s", "gpu_hours": "GPU-h"}[axis]


def _reach(r: GroupResult) -> str:
    return num(r.reach) if r.reach is not None else f"{NOT_REACHED} (best {rew(r.best)})"


def _speedup(r: GroupResult, baseline: str) -> str:
    if r.speedup is None:
        return "—"
    return f"{r.speedup:.2f}×" + (" (baseline)" if r.label == baseline else "")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def _steps(r: GroupResult) -> str:
    lo, hi = min(r.steps), max(r.steps)
    return str(lo) if lo == hi else f"{lo}–{hi}"


def outcome_table(c: Comparison) -> tuple[list[str], list[list[str]]]:
    s, u = c.settings, unit(c.settings.axis)
    header = ["group", "seeds", "steps", f"final reward (last {s.smooth} steps)", f"reward at {num(c.budget)} {u}",
              f"{u} to reach {rew(c.target)}", f"speedup vs {c.baseline}", f"total {u}"]
    rows = [[r.label, str(len(r.runs)), _steps(r), with_spread(r.final, band=s.band),
             with_spread(r.at_budget, band=s.band), _reach(r), _speedup(r, c.baseline),
             with_spread(r.total[s.axis], num, s.band)] for r in c.groups]
    return header, rows


def cost_table(c: Comparison) -> tuple[list[str], list[list[str]]]:
    band = c.settings.band
    header = ["group", "s / step", "rollout s", "reward s", "update s", "transformer fwd / step",
              "transformer bwd / step", "total wall-clock s", "total GPU-h"]
    rows = []
    for r in c.groups:
        p = r.per_step
        # the spread of s/step says how steady the timing is; phase means are enough to see where time goes
        rows.append([r.label, with_spread(p[STEP_TIME], num, band), *(num(p[k].mean) for k in (*PHASES, *COUNTS)),
                     *(with_spread(r.total.get(a), num, band) for a in ("wallclock_s", "gpu_hours"))])
    return header, rows


def runs_table(c: Comparison) -> tuple[list[str], list[list[str]]]:
    u = unit(c.settings.axis)
    header = ["group", "seed", "run", "steps", "final reward", f"total {u}", "source"]
    rows = []
    for r in c.groups:
        for t in sorted(r.traces, key=lambda t: show(t.run.seed)):
            total = t.total(c.settings.axis) if c.settings.axis in t.x else None
            rows.append([r.label, show(t.run.seed), t.run.name, str(len(t.reward)), rew(t.final), num(total),
                         t.run.source])
    return header, rows


def markdown(c: Comparison, context: dict[str, str], sources: list[str], figures: dict[str, str],
             title: str = "Method comparison") -> str:
    s = c.settings
    n_runs = sum(len(r.runs) for r in c.groups)
    lines = [f"# {title}", "",
             f"{n_runs} runs in {len(c.groups)} groups from {', '.join(sources)}. "
             f"Model `{context['model.name']}`, reward `{context['reward.name']}`, prompts `{context['data.name']}`. "
             f"Compute axis: {AXIS_LABELS[s.axis]} (`{AXES[s.axis]}`); spreads are {BAND_NAMES[s.band]}.", "",
             "## Reward at equal compute", ""]
    lines += _table(*outcome_table(c))
    lines += ["", "## Cost per step", ""]
    lines += _table(*cost_table(c))
    lines += ["", "## How the numbers are computed", ""] + [f"- {n}" for n in notes(c)]
    if figures:
        lines += ["", "## Figures", ""] + [f"![{name}]({path})" for name, path in figures.items()]
    lines += ["", "## Runs", ""]
    lines += _table(*runs_table(c))
    return "\n".join(lines) + "\n"


def notes(c: Comparison) -> list[str]:
    s, u = c.settings, unit(c.settings.axis)
    out = [
        f"Reward curves are `reward/mean` smoothed by a trailing mean over the last {s.smooth} logged steps; a run's "
        f"final reward is that curve's last value. Steps whose reward was NaN (skipped updates) are left out.",
        "Group curves: seeds that logged the same steps are averaged step by step, at the seeds' mean compute for "
        "that step (so a group reaches its final reward at its mean total compute); otherwise each seed's curve is "
        "linearly interpolated onto the union of the seeds' logged x-values and a seed that has ended keeps its "
        "final value.",
        f"Reward at {num(c.budget)} {u}: each seed's curve at that budget, averaged over seeds. "
        + ("The budget was given with --budget." if s.budget is not None else
           "The budget is the smallest total compute of any run compared, so every run reached it."),
        f"{u} to reach {rew(c.target)} (the final reward of the baseline `{c.baseline}`): the first point where the "
        f"group's mean curve reaches it (linear between logged points); `{NOT_REACHED}` gives the best value of the "
        f"mean curve. Speedup = the baseline's {u} to reach it / the group's (> 1: fewer {u} for the same reward).",
        f"Per-step timings are means over steps (the first {s.warmup_steps} left out as warm-up), then over seeds; "
        f"transformer passes are counted per sample on the model (a batch of B rows counts B).",
    ]
    if s.axis == "step":
        out.append("On the step axis, compute is the number of steps done (last logged step + 1).")
    if c.budget_runs_ended_before:
        out.append(f"Runs that ended before the budget count with their final reward: "
                   f"{', '.join(c.budget_runs_ended_before)}.")
    return out


def _stat(s: Stat | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"mean": _f(s.mean), "lo": _f(s.lo), "hi": _f(s.hi), "spread": _f(s.spread), "n": s.n,
            "values": [_f(v) for v in s.values]}


def _f(v):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


def to_json(c: Comparison, context: dict[str, str], sources: list[str], figures: dict[str, str]) -> dict[str, Any]:
    s = c.settings
    return {
        "settings": {"axis": s.axis, "axis_metric": AXES[s.axis], "smooth": s.smooth, "band": s.band,
                     "warmup_steps": s.warmup_steps, "budget_given": s.budget},
        "context": context, "sources": sources, "figures": figures,
        "baseline": c.baseline, "budget": c.budget, "target_reward": c.target,
        "groups": [{
            "label": r.label, "seeds": len(r.runs), "steps": r.steps, "final_reward": _stat(r.final),
            "reward_at_budget": _stat(r.at_budget), "reach": _f(r.reach), "best": _f(r.best),
            "speedup": _f(r.speedup), "total": {a: _stat(v) for a, v in r.total.items()},
            "per_step": {k: _stat(v) for k, v in r.per_step.items()},
            "runs": [{"id": t.run.run_id, "name": t.run.name, "source": t.run.source, "seed": t.run.seed,
                      "group": t.run.group, "steps": len(t.reward), "final_reward": t.final,
                      "total": {a: t.total(a) for a in t.x}} for t in r.traces],
        } for r in c.groups],
    }
