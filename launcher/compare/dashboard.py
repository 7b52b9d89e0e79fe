"""``rewardflow-dashboard``: a W&B workspace of every documented metric family, saved to a project in one command.

The panels are built from :data:`launcher.tracking.metric_names.FAMILIES` (the documented metrics, docs/metrics.md),
never from a list of their own: a section per family, a panel per metric, with a few panels that belong together
(the phases' seconds stacked, the first update's ratio drift on one log scale, the memory peaks, the transformer
passes) and the headline metrics against the compute axes as well (reward and held-out score against wall-clock and
GPU-hours, so methods compare at equal compute). Names the config chooses (``eval/<reward>/mean``,
``reward/<component>``) and the method-specific namespaces (``jagg/``) are regular expressions, or the names found
in the runs when they are known. The runs are one sweep's (``--group``, W&B's run group), ``train`` runs only,
grouped by ``method.name``: one colour per method, its seeds' mean with a band of one standard deviation.

The spec (:class:`Dashboard`) is plain data: ``--json PATH`` writes it without the network, :func:`to_workspace`
turns it into a ``wandb_workspaces`` workspace, and :mod:`launcher.compare.dashboard_preview` draws the same panels
with matplotlib from local run folders (docs/wandb.md#dashboard-template)."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from launcher.tracking import metric_names as mn

log = logging.getLogger(__name__)

GROUP_BY = ("method.name",)  # one colour per method; a sweep's seeds of a method become one band
JOB_TYPE = "train"  # rewardflow-compare's summary runs are `compare`: not training curves
#: the metrics plotted against the compute axes too, and which axes (an evaluation's are its own: docs/metrics.md)
COMPUTE_PANELS = {
    "reward/mean": mn.COMPUTE_AXES,
    "eval/<reward>/mean": mn.EVAL_COMPUTE_AXES,
    "val/<reward>/mean": mn.EVAL_COMPUTE_AXES,
}
#: metrics that share one panel: (title, members, stacked, log scale)
SHARED_PANELS = (
    ("seconds per step by phase (stacked)", mn.PHASE_TIMES, True, False),
    ("transformer passes per step", ("count/transformer_fwd", "count/transformer_bwd"), False, False),
    (
        "first update |ratio - 1| (0 in exact arithmetic)",
        tuple(f"health/first_update_ratio_dev_{s}" for s in ("mean", "p50", "p90", "p99", "max")),
        False,
        True,
    ),
    (
        "peak GPU memory per phase (GiB)",
        ("memory/rollout_peak_gib", "memory/reward_peak_gib", "memory/update_peak_gib"),
        False,
        False,
    ),
    (
        "planned GPU memory per phase (GiB)",
        ("memory/planned_rollout_gib", "memory/planned_update_gib", "memory/planned_peak_gib"),
        False,
        False,
    ),
)
#: a metric of another family shown first in a section, beside that section's metrics: the training reward beside the
#: held-out scores, where reward hacking shows as it rising while they fall (docs/comparing.md#reward-hacking)
BESIDE = {"evaluation": ("reward/mean", "training reward/mean, beside the held-out scores below")}
AXIS_NAMES = {
    mn.STEP: "step",
    "time/wallclock_s": "wall-clock",
    "time/gpu_hours": "GPU-hours",
    "time/eval_wallclock_s": "wall-clock before it",
    "time/eval_gpu_hours": "GPU-hours before it",
}


@dataclass
class Panel:
    """A line plot: ``y`` names, or ``y_regex`` (every logged metric it matches), against ``x``."""

    title: str
    y: list[str] = field(default_factory=list)
    y_regex: str | None = None
    x: str = mn.STEP
    stacked: bool = False
    log_y: bool = False

    def metrics(self, logged: Iterable[str]) -> list[str]:
        """The metrics of ``logged`` this panel draws."""
        if self.y_regex is None:
            return [k for k in self.y if k in set(logged)]
        pattern = re.compile(self.y_regex)
        return sorted(k for k in logged if pattern.search(k))


@dataclass
class Section:
    title: str
    family: str
    about: str
    panels: list[Panel]
    cuda_only: bool = False


@dataclass
class Dashboard:
    name: str
    sections: list[Section]
    group: str | None = None  # W&B run group (a sweep); None: every run of the project
    group_by: list[str] = field(default_factory=lambda: list(GROUP_BY))
    job_type: str = JOB_TYPE
    band: str = "stddev"  # W&B groupby_rangefunc: the band around a group's mean

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Dashboard:
        sections = [Section(**{**s, "panels": [Panel(**p) for p in s["panels"]]}) for s in d["sections"]]
        return cls(**{**d, "sections": sections})

    def panels(self) -> list[Panel]:
        return [p for s in self.sections for p in s.panels]


def build_dashboard(
    group: str | None = None,
    names: Mapping[str, Sequence[str]] | None = None,
    families: Sequence[mn.MetricFamily] | None = None,
    title: str | None = None,
) -> Dashboard:
    """The dashboard of every family. ``names`` fills a template's ``<part>`` with the values the runs use
    (``{"reward": ["hps"], "component": ["hps", "clip"]}``); a template without values is a regular expression."""
    families = mn.FAMILIES if families is None else families
    sections = [Section(f.title, f.key, f.about, _family_panels(f, names or {}), f.cuda_only) for f in families]
    name = title or (f"rewardflow: {group}" if group else "rewardflow")
    return Dashboard(name=name[:128], sections=sections, group=group)


def _family_panels(family: mn.MetricFamily, names: Mapping[str, Sequence[str]]) -> list[Panel]:
    panels: list[Panel] = []
    if family.key in BESIDE:
        metric, title = BESIDE[family.key]
        panels.append(Panel(title, y=[metric]))
    done: set[str] = set()
    x_axes = set(mn.EVAL_COMPUTE_AXES)  # an evaluation's compute is an x axis only: as y it repeats the training's
    for metric in family.metrics:
        if metric in done or metric in x_axes:
            continue
        shared = next((s for s in SHARED_PANELS if metric in s[1]), None)
        if shared is not None:
            title, members, stacked, log_y = shared
            ys = [m for m in members if m in family.metrics]
            panels.append(Panel(title, y=ys, stacked=stacked, log_y=log_y))
            done.update(ys)
            continue
        panels += _against_axes(metric, [metric], None)
        done.add(metric)
    for template in family.templates:
        part = re.search(r"<([^<>/]+)>", template)
        if part is not None and part.group(1) in names:  # the runs' values (none: the runs log no such metric)
            ys = [template.replace(part.group(0), v) for v in names[part.group(1)]]
            if ys:
                panels += _against_axes(template, ys, None)
        else:
            panels += _against_axes(template, [], mn.template_regex(template))
    for prefix in family.prefixes:
        panels.append(Panel(f"{prefix}* (its method's runs only)", y_regex=f"^{re.escape(prefix)}.+$"))
    return panels


def _against_axes(name: str, ys: list[str], regex: str | None) -> list[Panel]:
    out = []
    for x in (mn.STEP, *COMPUTE_PANELS.get(name, ())):
        shown = ", ".join(ys) if ys and len(ys) <= 2 else name
        title = shown if x == mn.STEP else f"{shown} vs {AXIS_NAMES[x]}"
        out.append(Panel(title, y=list(ys), y_regex=regex, x=x))
    return out


def names_in_runs(configs: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """The template values the runs' configs give: the trained and evaluated rewards, a multi reward's components
    (an empty list: the runs log no such metric)."""
    rewards: dict[str, None] = {}
    components: dict[str, None] = {}
    for config in configs:
        reward = config.get("reward") or {}
        if isinstance(reward, dict):
            if reward.get("name"):
                rewards[str(reward["name"])] = None
            for c in reward.get("components") or {}:
                components[str(c)] = None
        evaluation = config.get("eval") or {}
        if isinstance(evaluation, dict):
            for r in evaluation.get("rewards") or {}:
                rewards[str(r)] = None
    return {"reward": list(rewards), "component": list(components)}


# --- W&B -----------------------------------------------------------------------------------------------------------


class DashboardError(RuntimeError):
    """What the command prints instead of a traceback: what went wrong and what to do."""


def to_workspace(d: Dashboard, entity: str, project: str):
    """The ``wandb_workspaces`` workspace of ``d`` (not saved)."""
    try:
        import wandb_workspaces.reports.v2 as wr
        import wandb_workspaces.workspaces as ws
        from wandb_workspaces import expr
    except ImportError as e:
        raise DashboardError(
            "the W&B workspace API is not installed: pip install 'rewardflow[report]' (wandb-workspaces); "
            "--json PATH writes the dashboard's spec without it"
        ) from e

    def plot(p: Panel):
        kwargs: dict[str, Any] = dict(
            title=p.title, x=p.x, groupby_aggfunc="mean", groupby_rangefunc=d.band, log_y=p.log_y or None
        )
        if p.y_regex is not None:
            kwargs["metric_regex"] = p.y_regex
        else:
            kwargs["y"] = list(p.y)
        if p.stacked:
            kwargs["plot_type"] = "stacked-area"
        return wr.LinePlot(**kwargs)

    filters = [expr.Metric("JobType") == d.job_type]
    if d.group:
        filters.append(expr.Metric("Group") == d.group)
    return ws.Workspace(
        entity=entity,
        project=project,
        name=d.name,
        sections=[
            ws.Section(name=s.title, panels=[plot(p) for p in s.panels], is_open=not s.cuda_only) for s in d.sections
        ],
        runset_settings=ws.RunsetSettings(filters=filters, groupby=[expr.Config(k) for k in d.group_by]),
    )


NOT_ONLINE = (
    "W&B is not online here ({why}), so the dashboard cannot be saved to {where}. Run `wandb login` (or set "
    "WANDB_API_KEY; unset WANDB_MODE, or `wandb online`) where the W&B server can be reached, and rerun this command. "
    "Runs logged offline must be uploaded first: `wandb sync <run dir>/wandb/offline-run-*`. Without W&B: "
    "`rewardflow-dashboard --json dashboard.json` writes the spec, `rewardflow-dashboard --preview dashboard.png "
    "RUN_DIRS...` draws it from local runs."
)


def save(d: Dashboard, project: str) -> str:
    """Save ``d`` as a saved view of ``project`` (``ENTITY/PROJECT`` or ``PROJECT``); returns its URL."""
    from launcher.tracking.wandb_logger import resolve_mode

    mode, why = resolve_mode("auto")  # what a training run here would do: WANDB_MODE, `wandb offline`, credentials
    if mode != "online":
        raise DashboardError(NOT_ONLINE.format(why=why, where=project))
    entity, _, name = project.rpartition("/")
    try:
        if not entity:
            import wandb

            entity = wandb.Api().default_entity
        workspace = to_workspace(d, entity, name)
        workspace.save()
        return str(workspace.url)
    except DashboardError:
        raise
    except Exception as e:  # network, permissions, an unknown project: say so, without W&B's traceback
        raise DashboardError(
            f"saving the workspace to {entity}/{name} failed ({type(e).__name__}: {e}). Check that the project "
            "exists and that `wandb login` is for an account that can write to it; offline runs need `wandb sync` "
            "first."
        ) from e


# --- command line --------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="rewardflow-dashboard",
        description="Save a W&B workspace of every rewardflow metric family (reward, held-out evaluation, policy "
        "update, time per phase, transformer passes, health, memory) to a project, grouped by method; or write "
        "its spec, or draw it from local runs. docs/wandb.md#dashboard-template",
        epilog="examples:\n"
        "  rewardflow-dashboard --project me/rewardflow --group sweep-2026-11-29_20-16-04\n"
        "  rewardflow-dashboard --json dashboard.json\n"
        "  rewardflow-dashboard --preview dashboard.png outputs/train/multiruns/2026-11-29_20-16-04",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--project", help="ENTITY/PROJECT (or PROJECT: your default entity) to save the workspace to")
    p.add_argument("--group", help="show one W&B run group only (a sweep: sweep-<date>_<time>, or logger.group)")
    p.add_argument("--name", help="the workspace's name (default: rewardflow: <group>)")
    p.add_argument("--json", metavar="PATH", help="write the dashboard's spec as JSON (no network); - for stdout")
    p.add_argument("--preview", metavar="PNG", help="draw the panels from the local RUN_DIRS into this image")
    p.add_argument("runs", nargs="*", metavar="RUN_DIRS", help="with --preview: run folders or sweep folders")
    args = p.parse_args(argv)
    if not (args.project or args.json or args.preview):
        p.error("say where the dashboard goes: --project ENTITY/PROJECT, --json PATH or --preview PNG RUN_DIRS...")
    if args.preview and not args.runs:
        p.error("--preview draws local runs: add their run or sweep folders")
    if args.runs and not args.preview:
        p.error("run folders are for --preview; --project shows the project's runs")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        runs = None
        if args.preview:
            from launcher.compare.errors import CompareError
            from launcher.compare.local import load_local

            try:
                runs = load_local(args.runs, source="jsonl")
            except CompareError as e:
                raise DashboardError(str(e)) from e
            if args.group:
                runs = [r for r in runs if r.group == args.group]
                if not runs:
                    raise DashboardError(f"no run of group {args.group} in {' '.join(args.runs)}")
        names = names_in_runs(r.config for r in runs) if runs else {}
        d = build_dashboard(args.group, names, title=args.name)
        if args.json:
            text = json.dumps(d.to_dict(), indent=1) + "\n"
            if args.json == "-":
                sys.stdout.write(text)
            else:
                Path(args.json).write_text(text)
                print(f"dashboard spec: {args.json} ({len(d.sections)} sections, {len(d.panels())} panels)")
        if args.preview:
            from launcher.compare.dashboard_preview import render

            assert runs is not None
            render(d, runs, Path(args.preview))
            print(f"dashboard preview: {args.preview} ({len(runs)} runs)")
        if args.project:
            print(f"W&B workspace: {save(d, args.project)}")
    except DashboardError as e:
        print(f"rewardflow-dashboard: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
