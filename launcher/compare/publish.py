"""``--wandb-report``: put the comparison next to the runs on W&B.

With the W&B Report API (the optional ``wandb-workspaces`` package) it saves a report in the runs' project: the
Markdown report (warnings, tables, definitions), and line plots against step, wall-clock and GPU-hours over exactly
the compared runs, grouped like the comparison: every held-out metric the runs logged (``eval/<reward>/mean``, the
compared one first, then the other rewards, which show reward hacking), the training reward, the evaluation's own
time (``time/eval_s``, outside the compute axes) and the per-step costs. Without that package, or when saving the
report fails, it logs a summary run instead (job type ``compare``, in the runs' group): the tables (with the
intervals and verdicts) as ``wandb.Table``s, the curves as a table, the PNGs as images and the Markdown as HTML.
The compare command skips ``compare`` runs when it reads a project, so the summary run never becomes one of the runs
compared.
"""

from __future__ import annotations

import html
import logging
import math
from pathlib import Path
from types import ModuleType
from typing import Literal

from launcher.compare import stats
from launcher.compare.aggregate import Comparison
from launcher.compare.metric import eval_keys
from launcher.compare.online import COMPARE_JOB_TYPE
from launcher.compare.runs import AXES, COUNTS, PHASES, REWARD, STEP_TIME, axis_key, axis_unit

log = logging.getLogger(__name__)
# our band -> W&B's groupby_rangefunc; W&B has no confidence interval, the standard error is the nearest
_RANGE = {"ci": "stderr", "std": "stddev", "sem": "stderr", "minmax": "minmax"}
EVAL_TIME = "time/eval_s"


def publish(
    c: Comparison,
    project: str,
    by: list[str],
    tables_md: str,
    out_dir: Path,
    figures: dict[str, str],
    mode: Literal["online", "offline", "disabled"] = "online",
) -> str:
    """Save a report (or log a summary run); returns its URL (or the offline run folder)."""
    wr: ModuleType | None
    try:
        import wandb_workspaces.reports.v2 as wr
    except ImportError:
        wr = None
        log.info(
            "wandb-workspaces is not installed (pip install wandb-workspaces): logging a summary run instead "
            "of a report"
        )
    if wr is not None and mode == "online":
        try:
            report = build_report(wr, c, project, by, tables_md)
            report.save()
            return str(report.url)
        except Exception as e:  # permissions, API changes: the summary run still gets the numbers there
            log.warning("saving the W&B report failed (%s: %s); logging a summary run instead", type(e).__name__, e)
    return log_summary_run(c, project, tables_md, out_dir, figures, mode)


def _split(project: str) -> tuple[str | None, str]:
    entity, _, name = project.rpartition("/")
    return entity or None, name


def build_report(wr, c: Comparison, project: str, by: list[str], tables_md: str):
    """The report object (not saved). ``wr`` is ``wandb_workspaces.reports.v2``."""
    entity, name = _split(project)
    ids = sorted({t.run.run_id for r in c.groups for t in r.traces})
    runset = wr.Runset(
        entity=entity, project=name, name="compared runs", filters=f"ID in {ids!r}", groupby=[f"config.{k}" for k in by]
    )
    band = _RANGE[c.settings.band]
    runs = [t.run for r in c.groups for t in r.traces]
    held_out = eval_keys(runs)
    metrics = list(dict.fromkeys([c.metric.key, *held_out, REWARD]))  # the compared one first
    panels = [
        wr.LinePlot(
            title=f"{key}{_kind(key, held_out)} vs {x}", x=x, y=[key], groupby_aggfunc="mean", groupby_rangefunc=band
        )
        for key in metrics
        for x in dict.fromkeys(axis_key(a, key) for a in AXES)
    ]
    if any(r.has(EVAL_TIME) for r in runs):
        panels.append(
            wr.LinePlot(
                title="evaluation seconds (not in the compute axes)",
                x="step",
                y=[EVAL_TIME],
                groupby_aggfunc="mean",
                groupby_rangefunc=band,
            )
        )
    panels.append(
        wr.LinePlot(
            title="seconds per step by phase",
            x="step",
            y=[STEP_TIME, *PHASES],
            groupby_aggfunc="mean",
            groupby_rangefunc=band,
        )
    )
    panels.append(wr.LinePlot(title="transformer passes per step", x="step", y=list(COUNTS), groupby_aggfunc="mean"))
    kwargs = {"entity": entity} if entity else {}
    return wr.Report(
        project=name,
        title=f"rewardflow compare: {', '.join(r.label for r in c.groups)}"[:128],
        description=f"{c.metric.key}; baseline {c.baseline}; compute axis {axis_key(c.settings.axis, c.metric.key)}"
        f"{f'; {len(c.warnings)} thin-evidence warnings' if c.warnings else ''}.",
        blocks=[wr.MarkdownBlock(text=tables_md), wr.PanelGrid(runsets=[runset], panels=panels)],
        **kwargs,
    )


def _kind(key: str, held_out: list[str]) -> str:
    return " (held-out)" if key in held_out else " (training reward)" if key == REWARD else ""


def _finite(v):
    """W&B tables are JSON: no interval (NaN) or an unbounded one (inf) is stored as null."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


def log_summary_run(
    c: Comparison,
    project: str,
    tables_md: str,
    out_dir: Path,
    figures: dict[str, str],
    mode: Literal["online", "offline", "disabled"] = "online",
) -> str:
    import wandb

    entity, name = _split(project)
    groups = {t.run.group for r in c.groups for t in r.traces}
    group = groups.pop() if len(groups) == 1 else None
    s = c.settings
    run = wandb.init(
        project=name,
        entity=entity,
        group=group,
        job_type=COMPARE_JOB_TYPE,
        tags=["compare"],
        name=f"compare {group or ''}".strip(),
        dir=str(out_dir),
        mode=mode,
        reinit="finish_previous",
        config={
            "compare": {
                "axis": s.axis,
                "smooth": c.smooth,
                "band": s.band,
                "baseline": c.baseline,
                "budget": c.budget,
                "target": c.target,
                "metric": c.metric.key,
                "confidence": s.confidence,
                "interval": stats.METHOD,
                "axis_unit": axis_unit(s.axis, c.device),
                "warmup_steps": s.warmup_steps,
            }
        },
    )
    columns = [
        "group",
        "seeds",
        "metric",
        "final",
        "final_lo",
        "final_hi",
        "final_vs_baseline",
        "value_at_budget",
        "reach",
        "reach_lo",
        "reach_hi",
        "speedup",
        "speedup_lo",
        "speedup_hi",
        "speedup_vs_baseline",
        "s_per_step",
        "transformer_fwd_per_step",
        "transformer_bwd_per_step",
    ]
    rows = []
    for r in c.groups:
        base = r.label == c.baseline
        reach = r.reach
        assert r.at_budget is not None  # compare() sets it on every group
        rows.append(
            [
                _finite(v)
                for v in (
                    r.label,
                    len(r.runs),
                    c.metric.key,
                    r.final.mean,
                    r.final.lo,
                    r.final.hi,
                    None if base else r.verdicts["final"],
                    r.at_budget.mean,
                    *((reach.mean, reach.lo, reach.hi) if reach else (None, None, None)),
                    r.speedup,
                    r.speedup_lo,
                    r.speedup_hi,
                    None if base else r.verdicts["reach"],
                    r.per_step[STEP_TIME].mean,
                    r.per_step[COUNTS[0]].mean,
                    r.per_step[COUNTS[1]].mean,
                )
            ]
        )
    curves = [
        [r.label, axis, float(x), float(m), float(lo), float(hi)]
        for r in c.groups
        for axis, cv in r.curves.items()
        for x, m, lo, hi in zip(cv.x, cv.mean, cv.lo, cv.hi)
    ]
    payload = {
        "compare/groups": wandb.Table(columns=columns, data=rows),
        "compare/curves": wandb.Table(columns=["group", "axis", "x", "mean", "lo", "hi"], data=curves),
        "compare/report": wandb.Html(f"<pre>{html.escape(tables_md)}</pre>"),
    }
    for title, file in figures.items():
        payload[f"compare/{Path(file).stem}"] = wandb.Image(str(out_dir / file), caption=title)
    run.log(payload)
    for r in c.groups:
        run.summary[f"compare/{r.label}/final"] = r.final.mean
        run.summary[f"compare/{r.label}/speedup"] = r.speedup
    run.summary["compare/warnings"] = [w.message for w in c.warnings]
    where = str(run.url) if mode == "online" else str(Path(run.dir).parent)
    run.finish()
    return where
