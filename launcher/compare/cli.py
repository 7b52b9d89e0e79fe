"""``rewardflow-compare`` (also ``python -m launcher.compare``): methods side by side at equal compute.

Examples::

    rewardflow-compare outputs/train/multiruns/2026-11-29_20-16-04 --baseline dance_grpo
    rewardflow-compare outputs/train/multiruns --group sweep-2026-11-29_20-16-04 --axis wallclock_s
    rewardflow-compare --project me/rewardflow --group sweep-2026-11-29_20-16-04 --wandb-report
    rewardflow-compare RUN_DIRS... --by method.name,method.window_size --where model.name=tiny_flux
    rewardflow-compare outputs/train/multiruns/2026-11-29_20-16-04 --metric eval/pickscore/mean --axis step

Bad input (no runs, mixed groups, unknown baseline) ends with a message and exit code 2, not a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from launcher.compare import aggregate, completeness, evidence, grouping, hacking, plots, protocol, report, stats
from launcher.compare.errors import CompareError
from launcher.compare.local import SOURCES, load_local
from launcher.compare.metric import SMOOTH_EVAL, SMOOTH_TRAINING, choose_metric
from launcher.compare.runs import AXES, REWARD, RunData

log = logging.getLogger("rewardflow.compare")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rewardflow-compare",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compare reward fine-tuning methods at equal compute: curves of the held-out evaluation "
        "(eval/<reward>/mean; the training reward when runs have none) against step, wall-clock and "
        "GPU-hours, means over seeds with 95% intervals, a Markdown table (final value, value at a "
        "common budget, compute to reach a target and the speedup, each tested against a baseline; "
        "time per step by phase, transformer passes) and warnings when the evidence is thin, from "
        "local run/sweep folders or W&B runs. Definitions: docs/compare_report.md.",
        epilog=__doc__.split("Examples::", 1)[1].split("Bad input", 1)[0],
    )
    src = p.add_argument_group("which runs")
    src.add_argument("paths", nargs="*", help="run folders, sweep folders, folders above them, or run-*.wandb files")
    src.add_argument("--project", help="W&B ENTITY/PROJECT (or PROJECT) to read runs from online")
    src.add_argument(
        "--group",
        action="append",
        default=[],
        help="W&B group(s), e.g. sweep-<date>_<time> "
        "(online filter; for local folders, the group the trainer gave the run); repeatable or a,b",
    )
    src.add_argument("--sweep", help="W&B sweep id (online)")
    src.add_argument("--tag", action="append", default=[], help="keep runs with any of these W&B tags")
    src.add_argument("--state", action="append", default=[], help="W&B run states to keep, e.g. finished (online)")
    src.add_argument(
        "--source",
        choices=SOURCES,
        default="auto",
        help="local files to read: metrics.jsonl when present else the offline W&B file (auto), or only one kind",
    )
    src.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keep runs whose config has KEY=VALUE (repeatable), e.g. model.name=tiny_flux",
    )
    grp = p.add_argument_group("how to compare")
    grp.add_argument(
        "--by",
        default="",
        help="config keys to group by besides method.name, comma-separated "
        "(e.g. method.window_size); runs of one group are averaged as seeds",
    )
    grp.add_argument(
        "--allow-mixed",
        default="",
        metavar="KEYS",
        help="config keys (globs) allowed to differ between the runs compared or inside a group",
    )
    grp.add_argument("--baseline", help="group the speedups are measured against (default: dance_grpo if present)")
    grp.add_argument(
        "--axis",
        choices=tuple(AXES),
        default="gpu_hours",
        help="compute axis for the common budget and the speedup (default gpu_hours)",
    )
    grp.add_argument(
        "--budget",
        type=float,
        help="common compute budget in --axis units (default: the smallest total among the runs)",
    )
    grp.add_argument(
        "--metric",
        default="auto",
        help="metric compared: auto (eval/<trained reward>/mean when "
        "the runs logged it, else the training reward reward/mean), or a logged key, e.g. "
        "eval/pickscore/mean",
    )
    grp.add_argument(
        "--smooth",
        type=int,
        help="trailing window (logged points) smoothing the metric for the "
        f"curves, the final value and the budget/reach figures (default: {SMOOTH_TRAINING} for the "
        f"training reward, {SMOOTH_EVAL} = none for an evaluation)",
    )
    grp.add_argument(
        "--target",
        type=float,
        help="value whose compute to reach gives the speedups (default: the "
        "lowest final value among the baseline's seeds)",
    )
    grp.add_argument(
        "--confidence",
        type=float,
        default=stats.CONFIDENCE,
        help=f"confidence of the intervals ({stats.METHOD}; default {stats.CONFIDENCE})",
    )
    grp.add_argument(
        "--include-unfinished",
        action="store_true",
        help="compare runs that did not finish too (last step below trainer.steps, crashed, running); by default "
        "they are named in the report and left out",
    )
    grp.add_argument(
        "--band",
        choices=aggregate.BANDS,
        default="ci",
        help="band of the curves: ci = the interval of the mean (default), or the spread over seeds",
    )
    grp.add_argument("--warmup-steps", type=int, default=1, help="first steps left out of per-step timings")
    warn = p.add_argument_group("thin-evidence warnings (in the report and on the console)")
    th = evidence.Thresholds()
    warn.add_argument(
        "--min-seeds",
        type=int,
        default=th.min_seeds,
        help=f"warn when a group has fewer seeds (default {th.min_seeds})",
    )
    warn.add_argument(
        "--min-points",
        type=int,
        default=th.min_points,
        help="warn when a run has fewer logged "
        f"points of the metric: evaluations, or steps for the training reward (default {th.min_points})",
    )
    warn.add_argument(
        "--max-step-cv",
        type=float,
        default=th.max_step_cv,
        help="warn when the seeds of a group "
        "differ more in s/step (coefficient of variation: the machine was loaded) "
        f"(default {th.max_step_cv})",
    )
    out = p.add_argument_group("output")
    out.add_argument(
        "--out",
        help="output folder (default: <folder>/compare for one local folder, else outputs/compare/<date>_<time>)",
    )
    out.add_argument("--title", default="Method comparison")
    out.add_argument(
        "--wandb-report",
        action="store_true",
        help="also publish to W&B (online sources only): a "
        "report with the tables and grouped panels, or a summary run without wandb-workspaces",
    )
    return p


def _csv(items) -> list[str]:
    if isinstance(items, str):
        items = [items]
    return [x.strip() for item in items for x in item.split(",") if x.strip()]


def load_runs(args, api=None) -> list[RunData]:
    if not args.paths and not args.project:
        raise CompareError(
            "nothing to compare: give run or sweep folders (e.g. outputs/train/multiruns/<ts>) "
            "or a W&B project with --project ENTITY/PROJECT"
        )
    runs: list[RunData] = []
    if args.paths:
        local = load_local(args.paths, args.source)
        groups, tags = _csv(args.group), _csv(args.tag)
        if groups:
            local = _keep(
                local, lambda r: r.group in groups, f"--group {','.join(groups)}", sorted({str(r.group) for r in local})
            )
        if tags:
            local = _keep(
                local,
                lambda r: bool(set(tags) & set(r.tags)),
                f"--tag {','.join(tags)}",
                sorted({t for r in local for t in r.tags}),
            )
        runs += local
    if args.project:
        from launcher.compare.online import load_online

        runs += load_online(args.project, _csv(args.group), args.sweep, _csv(args.tag), _csv(args.state), api=api)
    empty = [r for r in runs if not r.has(REWARD)]
    if empty:
        log.warning(
            "skipping %d run(s) that logged no %s yet: %s", len(empty), REWARD, ", ".join(r.name for r in empty[:5])
        )
    runs = [r for r in runs if r.has(REWARD)]
    if not runs:
        raise CompareError(f"none of the runs found logged {REWARD} (crashed before the first step, or still starting)")
    return grouping.apply_where(runs, grouping.parse_where(args.where))


def _keep(runs, pred, what, seen):
    kept = [r for r in runs if pred(r)]
    if not kept:
        raise CompareError(f"{what} leaves none of the {len(runs)} local runs; they have: {', '.join(seen) or 'none'}")
    return kept


def _out_dir(args) -> Path:
    if args.out:
        return Path(args.out)
    if len(args.paths) == 1 and Path(args.paths[0]).is_dir() and not args.project:
        return Path(args.paths[0]) / "compare"
    return Path("outputs") / "compare" / time.strftime("%Y-%m-%d_%H-%M-%S")


def run(args, api=None) -> dict:
    """Load, group, aggregate and write everything; returns the comparison as JSON-ready data."""
    if args.wandb_report and not args.project:
        raise CompareError(
            "--wandb-report publishes next to online runs: add --project ENTITY/PROJECT (for local "
            "offline runs, `wandb sync <run>/wandb/offline-run-*` them first)"
        )
    runs, incomplete = completeness.split(load_runs(args, api), args.include_unfinished)
    for i in incomplete:
        log.warning("%s: %s", "comparing unfinished run" if args.include_unfinished else "leaving out", i.describe())
    if not runs:
        raise CompareError(
            f"every run found is unfinished ({'; '.join(i.describe() for i in incomplete[:4])}); wait for them, "
            f"or compare them anyway with --include-unfinished"
        )
    by = list(dict.fromkeys(["method.name", *_csv(args.by)]))
    metric = choose_metric(runs, args.metric)
    if metric.held_out:
        grouping.check_ruler(runs, _csv(args.allow_mixed))
    groups = grouping.group_runs(runs, by, _csv(args.allow_mixed))
    baseline = grouping.select_baseline(groups, args.baseline)
    target, target_from, margin = args.target, "given with --target", protocol.fixed_in_config(runs, "margin")
    if target is None and (target := protocol.fixed_in_config(runs, "target")) is not None:
        target_from = protocol.FROM_CONFIG.format(key="target", value=target)
        log.info("target %g from the runs' config (protocol.target); --target overrides it", target)
    settings = aggregate.Settings(
        axis=args.axis,
        smooth=args.smooth,
        band=args.band,
        warmup_steps=args.warmup_steps,
        budget=args.budget,
        target=target,
        target_from=target_from,
        margin=margin,
        confidence=args.confidence,
        include_unfinished=args.include_unfinished,
        thresholds=evidence.Thresholds(args.min_seeds, args.min_points, args.max_step_cv),
    )
    comparison = aggregate.compare(groups, baseline, settings, metric, incomplete)
    context = grouping.context_of(runs)
    sources = [*map(str, args.paths)] + ([f"W&B {args.project}"] if args.project else [])

    out = _out_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    figures = {**plots.reward_figures(comparison, out), **plots.time_figure(comparison, out)}
    md = report.markdown(comparison, context, sources, figures, args.title)
    (out / "comparison.md").write_text(md)
    data = report.to_json(comparison, context, sources, figures)
    data["out_dir"] = str(out)
    if args.wandb_report:
        from launcher.compare.publish import publish

        data["wandb"] = publish(
            comparison, args.project, by, report.markdown(comparison, context, sources, {}, args.title), out, figures
        )
    (out / "comparison.json").write_text(json.dumps(data, indent=2))
    _print(comparison, out, data.get("wandb"))
    return data


def _print(c, out: Path, wandb_where: str | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=max(Console().width, 140))
    console.print(f"metric: {escape(c.metric.how_chosen.replace('`', '').replace('**', ''))}")
    for title, (header, rows) in (
        ("outcome at equal compute", report.outcome_table(c)),
        ("cost per step", report.cost_table(c)),
        *([("training reward against held-out scores", hacking.table(c.hacking))] if c.hacking else []),
    ):
        table = Table(title=title, title_justify="left")
        for h in header:
            table.add_column(escape(h), overflow="fold")
        for row in rows:
            table.add_row(*map(escape, row))
        console.print(table)
    # last, so they are what the user reads next to the numbers
    for w in c.warnings:
        console.print(f"[bold yellow]warning[/] ({w.kind}): {escape(w.message)}")
    pngs = ", ".join(sorted(p.name for p in out.glob("*.png")))
    console.print(f"wrote {out}/comparison.md, comparison.json, {pngs}")
    if wandb_where:
        console.print(f"W&B: {wandb_where}")


def main(argv: list[str] | None = None, api=None) -> int:
    logging.basicConfig(level=logging.INFO, format="rewardflow-compare: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        run(args, api)
    except CompareError as e:
        print(f"rewardflow-compare: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
