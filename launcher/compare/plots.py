"""The comparison as PNGs (matplotlib, headless): the compared metric against step, wall-clock and GPU-hours (mean
over seeds with a band), all three side by side, and the seconds per step split by phase. Labels say what is drawn:
the metric, its smoothing window as used, what the band is."""

from __future__ import annotations

from pathlib import Path

from launcher.compare.aggregate import Comparison, axis_offset
from launcher.compare.report import BAND_NAMES, curve_title, pct
from launcher.compare.runs import AXES, COUNTS, PHASES, STEP_TIME, axis_key, axis_label


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw(ax, c: Comparison, axis: str) -> None:
    s = c.settings
    for i, r in enumerate(c.groups):
        curve = r.curves.get(axis)
        if curve is None:
            continue
        color = f"C{i % 10}"
        seeds = f"{len(r.runs)} seed{'s' * (len(r.runs) > 1)}"
        # evaluations are sparse: mark each one
        ax.plot(
            curve.x,
            curve.mean,
            color=color,
            lw=1.8,
            label=f"{r.label} ({seeds})",
            marker="o" if c.metric.held_out else None,
            ms=3,
        )
        ax.fill_between(curve.x, curve.lo, curve.hi, color=color, alpha=0.2, lw=0)
    ax.axhline(c.target, color="0.4", ls=":", lw=1, label="target")
    if axis == s.axis:
        ax.axvline(c.budget - axis_offset(axis, c.metric.held_out), color="0.4", ls="--", lw=1, label="common budget")
    ax.set_xlabel(f"{axis_label(axis, c.device)} ({axis_key(axis, c.metric.key)})" if axis != "step" else "step")
    ax.set_ylabel(f"{c.metric.key} ({curve_title(c)})")
    if axis == "gpu_hours":  # tiny on a CPU demo, large on a cluster: scientific ticks stay readable
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 4))
    ax.grid(alpha=0.3)


def _band(c: Comparison) -> str:
    s = c.settings
    return f"{pct(s.confidence)} interval of the mean" if s.band == "ci" else BAND_NAMES[s.band]


def reward_figures(c: Comparison, out_dir: Path) -> dict[str, str]:
    """One PNG per axis plus all axes side by side; returns {figure name: file name}."""
    plt = _plt()
    axes = [a for a in AXES if any(a in r.curves for r in c.groups)]
    files = {}
    for axis in axes:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        _draw(ax, c, axis)
        ax.legend(fontsize=8, loc="lower right")
        ax.set_title(
            f"{c.metric.key} against {axis_label(axis, c.device).split(' (')[0]}\nband: {_band(c)}", fontsize=10
        )
        fig.tight_layout()
        name = f"reward_vs_{axis}.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        files[f"reward vs {axis_label(axis, c.device).split(' (')[0]}"] = name
    fig, panels = plt.subplots(1, len(axes), figsize=(5.2 * len(axes), 4.0), sharey=True, squeeze=False)
    for ax, axis in zip(panels[0], axes):
        _draw(ax, c, axis)
        if ax is not panels[0][0]:
            ax.set_ylabel("")
    panels[0][-1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{c.metric.key}; band: {_band(c)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out_dir / "reward_curves.png", dpi=110)
    plt.close(fig)
    files["reward curves"] = "reward_curves.png"
    return files


def time_figure(c: Comparison, out_dir: Path) -> dict[str, str]:
    """Stacked seconds per step by phase (rollout, reward, update, the rest of the step) per group."""
    plt = _plt()
    labels = [r.label for r in c.groups]
    fig, ax = plt.subplots(figsize=(max(4.8, 1.4 * len(labels) + 2), 4.0))
    bottom = [0.0] * len(labels)
    parts = [(k.split("/")[1].removesuffix("_s"), [r.per_step[k].mean for r in c.groups]) for k in PHASES]
    rest = [max(r.per_step[STEP_TIME].mean - sum(r.per_step[k].mean for k in PHASES), 0.0) for r in c.groups]
    for i, (name, values) in enumerate([*parts, ("other", rest)]):
        values = [0.0 if v != v else v for v in values]  # NaN (phase not logged) draws nothing
        ax.bar(labels, values, bottom=bottom, label=name, color=f"C{i}")
        bottom = [b + v for b, v in zip(bottom, values)]
    for i, r in enumerate(c.groups):  # the passes explain the bars: what each method pays per step
        fwd, bwd = (r.per_step[k].mean for k in COUNTS)
        ax.annotate(
            f"fwd {fwd:.4g} / bwd {bwd:.4g}",
            (i, bottom[i]),
            ha="center",
            va="bottom",
            fontsize=8,
            xytext=(0, 2),
            textcoords="offset points",
        )
    ax.set_ylabel(f"seconds per step (warm-up: first {c.settings.warmup_steps} left out)")
    ax.margins(y=0.12)
    ax.set_title("time per step by phase")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    plt.setp(ax.get_xticklabels(), rotation=15, ha="right")
    fig.tight_layout()
    fig.savefig(out_dir / "time_per_step.png", dpi=110)
    plt.close(fig)
    return {"time per step": "time_per_step.png"}
