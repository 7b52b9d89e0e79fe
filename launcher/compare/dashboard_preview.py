"""``rewardflow-dashboard --preview OUT.png RUN_DIRS...``: the dashboard's panels drawn locally with matplotlib.

The same spec as the W&B workspace (:mod:`launcher.compare.dashboard`), drawn from ``metrics.jsonl`` files: a
block per section, a plot per panel that the runs have data for, one colour per ``method.name`` (the spec's
``group_by``), each method's mean over its runs with a band of one standard deviation (W&B's ``mean`` and
``stddev`` grouping). Runs are averaged step by step, x included (W&B buckets x instead). A panel of several metrics
draws each with its own line style; a stacked panel draws the running sums, the top of each stacked layer."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Sequence

import numpy as np

from launcher.compare.dashboard import AXIS_NAMES, Dashboard, Panel
from launcher.compare.runs import RunData, config_get, show

COLUMNS = 4
STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))


def _label(run: RunData, keys: Sequence[str]) -> str:
    return " · ".join(show(config_get(run.config, k, "?")) for k in keys)


def _curve(runs: list[RunData], x: str, y: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Mean x, mean y and y's standard deviation over ``runs`` at each step where they logged both."""
    at: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for run in runs:
        for row in run.rows:
            xv, yv = row.get(x), row.get(y)
            if (
                isinstance(xv, (int, float))
                and isinstance(yv, (int, float))
                and math.isfinite(xv)
                and math.isfinite(yv)
            ):
                at[int(row["step"])].append((float(xv), float(yv)))
    if not at:
        return None
    steps = sorted(at)
    pts = [np.array(at[s]) for s in steps]
    return (
        np.array([p[:, 0].mean() for p in pts]),
        np.array([p[:, 1].mean() for p in pts]),
        np.array([p[:, 1].std() if len(p) > 1 else 0.0 for p in pts]),
    )


def _draw(ax, panel: Panel, methods: dict[str, list[RunData]], colors: dict[str, str], ys: list[str]) -> None:
    for method, runs in methods.items():
        below = None
        for i, y in enumerate(ys):
            curve = _curve(runs, panel.x, y)
            if curve is None:
                continue
            xs, mean, std = curve
            if panel.stacked:
                if below is not None and len(below) == len(mean):
                    mean = mean + below
                below = mean
            style = STYLES[i % len(STYLES)]
            label = method if len(ys) == 1 else f"{method}: {y.rsplit('/', 1)[-1]}"
            ax.plot(xs, mean, color=colors[method], linestyle=style, linewidth=1.4, label=label)
            if len(ys) == 1 and len(runs) > 1 and not panel.log_y:
                ax.fill_between(xs, mean - std, mean + std, color=colors[method], alpha=0.18, linewidth=0)
    if panel.log_y:
        ax.set_yscale("log")
    ax.set_title(panel.title + (f" ({ys[0]})" if panel.y_regex and len(ys) == 1 else ""), fontsize=8)
    ax.set_xlabel(AXIS_NAMES.get(panel.x, panel.x), fontsize=7)
    ax.tick_params(labelsize=6)
    ax.grid(alpha=0.3)
    if len(ys) > 1:
        ax.legend(fontsize=5, loc="best")


def render(d: Dashboard, runs: list[RunData], out: Path, dpi: int = 55) -> Path:
    """Draw ``d``'s panels from ``runs`` into the PNG ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods: dict[str, list[RunData]] = defaultdict(list)
    for run in runs:
        methods[_label(run, d.group_by)].append(run)
    methods = dict(sorted(methods.items()))
    palette = plt.get_cmap("tab10").colors
    colors = {m: palette[i % len(palette)] for i, m in enumerate(methods)}
    logged = sorted({k for r in runs for row in r.rows for k, v in row.items() if isinstance(v, (int, float))})

    blocks = []  # (section, [(panel, ys)], panels without data)
    for s in d.sections:
        drawn = [(p, p.metrics(logged)) for p in s.panels]
        with_data = [(p, ys) for p, ys in drawn if ys and p.x in logged]
        blocks.append((s, with_data, len(drawn) - len(with_data)))
    heights = [0.6] + [0.45 + 2.3 * math.ceil(len(w) / COLUMNS) if w else 0.45 for _, w, _ in blocks]
    fig = plt.figure(figsize=(4 * COLUMNS, sum(heights)), dpi=dpi)
    subfigs = fig.subfigures(len(heights), 1, height_ratios=heights)
    groups = sorted({r.group for r in runs if r.group})
    subfigs[0].suptitle(
        f"{d.name} | {len(runs)} runs{' of ' + ', '.join(groups) if groups else ''}, one colour per "
        f"{', '.join(d.group_by)}: mean over runs, band ±1 std | local preview of the W&B workspace spec",
        fontsize=10,
        y=0.8,
    )
    for sub, (section, with_data, missing) in zip(subfigs[1:], blocks):
        note = f"  [{missing} panel(s) with no data in these runs]" if missing else ""
        sub.suptitle(f"{section.title}: {section.about}{note}", fontsize=9, x=0.01, ha="left", fontweight="bold")
        if not with_data:
            continue
        axes = sub.subplots(math.ceil(len(with_data) / COLUMNS), COLUMNS, squeeze=False)
        for ax in axes.flat[len(with_data) :]:
            ax.axis("off")
        for ax, (panel, ys) in zip(axes.flat, with_data):
            _draw(ax, panel, methods, colors, ys)
        sub.subplots_adjust(left=0.04, right=0.99, bottom=0.14, top=0.86, wspace=0.22, hspace=0.55)
    handles = [plt.Line2D([], [], color=colors[m], linewidth=2) for m in methods]
    subfigs[0].legend(handles, list(methods), loc="lower center", fontsize=9, ncol=len(methods), frameon=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    from PIL import Image

    with Image.open(out) as image:  # a palette image: a third of the bytes, the same look for line plots
        quantized = image.convert("RGB").quantize(colors=64)
    quantized.save(out, optimize=True)
    return out
