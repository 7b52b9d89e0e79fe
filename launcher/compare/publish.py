"""``--wandb-report``: put the comparison next to the runs on W&B.

With the W&B Report API (the optional ``wandb-workspaces`` package) it saves a report in the runs' project: the
Markdown tables, and line plots of ``reward/mean`` against step, wall-clock and GPU-hours over exactly the compared
runs, grouped like the comparison (mean with the same band). Without that package, or when saving the report fails,
it logs a summary run instead (job type ``compare``, in the runs' group): the tables as ``wandb.Table``s, the curves
as a table, the PNGs as images and the Markdown as HTML. The compare command skips ``compare`` runs when it reads a
project, so the summary run never becomes one of the runs compared.
"""
from __future__ import annotations

import html
import logging
from pathlib import Path

from launcher.compare.aggregate import Comparison
from launcher.compare.online import COMPARE_JOB_TYPE
from launcher.compare.runs import AXES, COUNTS, PHASES, STEP_TIME

log = logging.getLogger(__name__)
_RANGE = {"std": "stddev", "sem": "stderr", "minmax": "minmax"}   # our band -> W&B's groupby_rangefunc


def publish(c: Comparison, project: str, by: list[str], tables_md: str, out_dir: Path, figures: dict[str, str],
            mode: str = "online") -> str:
    """Save a report (or log a summary run); returns its URL (or the offline run folder)."""
    try:
        import wandb_workspaces.reports.v2 as wr
    except ImportError:
        wr = None
        log.info("wandb-workspaces is not installed (pip install wandb-workspaces): logging a summary run instead "
                 "of a report")
    if wr is not None and mode == "online":
        try:
            report = build_report(wr, c, project, by, tables_md)
            report.save()
            return str(report.url)
        except Exception as e:       # permissions, API changes: the summary run still gets the numbers there
            log.warning("saving the W&B report failed (%s: %s); logging a summary run instead", type(e).__name__, e)
    return log_summary_run(c, project, tables_md, out_dir, figures, mode)


def _split(project: str) -> tuple[str | None, str]:
    entity, _, name = project.rpartition("/")
    return entity or None, name


def build_report(wr, c: Comparison, project: str, by: list[str], tables_md: str):
    """The report object (not saved). ``wr`` is ``wandb_workspaces.reports.v2``."""
    entity, name = _split(project)
    ids = sorted({t.run.run_id for r in c.groups for t in r.traces})
    runset = wr.Runset(entity=entity, project=name, name="compared runs", filters=f"ID in {ids!r}",
                       groupby=[f"config.{k}" for k in by])
    band = _RANGE[c.settings.band]
    panels = [wr.LinePlot(title=f"reward/mean vs {x}", x=x, y=["reward/mean"], groupby_aggfunc="mean",
                          groupby_rangefunc=band) for x in AXES.values()]
    panels.append(wr.LinePlot(title="seconds per step by phase", x="step", y=[STEP_TIME, *PHASES],
                              groupby_aggfunc="mean", groupby_rangefunc=band))
    panels.append(wr.LinePlot(title="transformer passes per step", x="step", y=list(COUNTS), groupby_aggfunc="mean"))
    kwargs = {"entity": entity} if entity else {}
    return wr.Report(project=name, title=f"rewardflow compare: {', '.join(r.label for r in c.groups)}"[:128],
                     description=f"Baseline {c.baseline}; compute axis {AXES[c.settings.axis]}.",
                     blocks=[wr.MarkdownBlock(text=tables_md), wr.PanelGrid(runsets=[runset], panels=panels)],
                     **kwargs)


def log_summary_run(c: Comparison, project: str, tables_md: str, out_dir: Path, figures: dict[str, str],
                    mode: str = "online") -> str:
    import wandb

    entity, name = _split(project)
    groups = {t.run.group for r in c.groups for t in r.traces}
    group = groups.pop() if len(groups) == 1 else None
    s = c.settings
    run = wandb.init(project=name, entity=entity, group=group, job_type=COMPARE_JOB_TYPE, tags=["compare"],
                     name=f"compare {group or ''}".strip(), dir=str(out_dir), mode=mode, reinit="finish_previous",
                     config={"compare": {"axis": s.axis, "smooth": s.smooth, "band": s.band, "baseline": c.baseline,
                                         "budget": c.budget, "warmup_steps": s.warmup_steps}})
    columns = ["group", "seeds", "final_reward", "final_reward_spread", "reward_at_budget", "reach", "speedup",
               "s_per_step", "transformer_fwd_per_step", "transformer_bwd_per_step"]
    rows = [[r.label, len(r.runs), r.final.mean, r.final.spread, r.at_budget.mean, r.reach, r.speedup,
             r.per_step[STEP_TIME].mean, r.per_step[COUNTS[0]].mean, r.per_step[COUNTS[1]].mean] for r in c.groups]
    curves = [[r.label, axis, float(x), float(m), float(lo), float(hi)]
              for r in c.groups for axis, cv in r.curves.items()
              for x, m, lo, hi in zip(cv.x, cv.mean, cv.lo, cv.hi)]
    payload = {"compare/groups": wandb.Table(columns=columns, data=rows),
               "compare/curves": wandb.Table(columns=["group", "axis", "x", "mean", "lo", "hi"], data=curves),
               "compare/report": wandb.Html(f"<pre>{html.escape(tables_md)}</pre>")}
    for title, file in figures.items():
        payload[f"compare/{Path(file).stem}"] = wandb.Image(str(out_dir / file), caption=title)
    run.log(payload)
    for r in c.groups:
        run.summary[f"compare/{r.label}/final_reward"] = r.final.mean
        run.summary[f"compare/{r.label}/speedup"] = r.speedup
    where = str(run.url) if mode == "online" else str(Path(run.dir).parent)
    run.finish()
    return where
