"""Plumbing of the claim studies: trainers built from Hydra overrides, the compute axis, seed statistics and the
verdict words, and what the studies' write-ups (``<study>_report``) share: a page's head, statistics as JSON, the
verdict the parts agree on, and the plots' setup and mean-over-seeds curves.

Every run goes through rewardflow's own :class:`launcher.train.trainer.Trainer` (one ``train_step`` at a time, so a study
can evaluate between steps) and its statistics are :mod:`launcher.compare.stats`: means over seeds with Student's t
intervals, and paired differences (variants trained with the same seed share the prompt order and every step's
sampling noise at the start, so the difference of two variants is estimated per seed).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from claim_studies.verdicts import INCONCLUSIVE, NOT_SHOWN, REFUTED, REPRODUCED, VERDICTS, agreed  # noqa: E402,F401
from launcher.compare.stats import Estimate, curve_interval, estimate  # noqa: E402

MIN_SEEDS = 5  # fewer seeds per variant give no verdict, whatever their intervals say
DEFAULT_SEEDS = [0, 1, 2, 3, 4]  # training seeds of every compared variant (scripts/claims.py --seeds)


@dataclass
class Context:
    """What the runner hands every study.

    Args:
        quick: the CI form: a few steps of every part, so the code runs end to end (its figures mean nothing).
        seeds: training seeds of every compared variant.
        work: where run directories go (``outputs/claims/<study>/...``).
        threads: torch threads per run.
        parts: the parts of a study to run (Flash-GRPO's testbeds, EAM's lambdas), None for all.
        say: progress printer.
    """

    quick: bool
    seeds: list[int]
    work: Path
    threads: int = 1
    parts: list[str] | None = None
    say: Callable[[str], None] = field(default=lambda msg: print(msg, flush=True))


@dataclass
class StudyResult:
    """What a study returns: ``data`` becomes ``<name>.json``, ``markdown`` ``<name>.md``, ``figures`` PNGs, and
    ``summary`` the study's row of the README table (claim, testbed, precondition, verdict, figures)."""

    name: str
    title: str
    verdict: str
    summary: dict[str, str]
    markdown: str
    data: dict
    figures: dict[str, object] = field(default_factory=dict)  # file stem -> matplotlib figure


def reproduce(study: str, seeds: list[int], extra: str = "") -> str:
    """The command (in backticks) that reruns ``study`` (``extra``: its part) with the seeds it ran with."""
    cmd = f"nice -n 10 .venv/bin/python scripts/claims.py --studies {study}{extra}"
    if list(seeds) != DEFAULT_SEEDS:
        cmd += " --seeds " + ",".join(map(str, seeds))
    return f"`{cmd}`"


def compose(overrides: list[str]):
    """``conf/train.yaml`` composed with ``overrides``, exactly as the CLI does."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from launcher.config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=list(overrides))


def make_trainer(overrides: list[str], run_dir: Path):
    """A trainer of ``overrides`` with files only (no W&B), no image grids, no progress bar."""
    from launcher.cli import _quiet_libraries
    from launcher.train.trainer import RunInfo, Trainer

    _quiet_libraries()
    logging.getLogger().setLevel(logging.WARNING)
    cfg = compose(["logger=none", "trainer.progress=false", "trainer.sample_every=0", *overrides])
    return Trainer(cfg, RunInfo(run_dir=run_dir))


def compute_units(metrics: dict) -> float:
    """A step's transformer work in forward-pass units: forwards + 2 x backwards (a backward pass costs about two
    forwards in FLOPs). Counted on the model, so it does not depend on the machine's load."""
    return float(metrics["count/transformer_fwd"]) + 2.0 * float(metrics["count/transformer_bwd"])


def timed_step(trainer, step: int) -> tuple[dict, float]:
    """``trainer.train_step(step)`` and the CPU seconds it took in this process (robust to other jobs' load,
    unlike wall-clock)."""
    t0 = time.process_time()
    metrics = trainer.train_step(step)
    return metrics, time.process_time() - t0


def paired(a: list[float], b: list[float]) -> Estimate:
    """Mean of the per-seed differences ``a - b`` with its 95% t interval."""
    return estimate([x - y for x, y in zip(a, b)])


def sign_of(e: Estimate) -> int:
    """+1 when the interval lies above 0, -1 below, 0 when it contains 0 (or there is none)."""
    if not e.has_interval:
        return 0
    return 1 if e.lo > 0 else -1 if e.hi < 0 else 0


def fmt(e: Estimate, digits: int = 3) -> str:
    """``mean [lo, hi]`` (or ``mean`` alone without an interval)."""
    if not e.has_interval:
        return f"{e.mean:.{digits}f}" if math.isfinite(e.mean) else "n/a"
    return f"{e.mean:.{digits}f} [{e.lo:.{digits}f}, {e.hi:.{digits}f}]"


def fmt_g(e: Estimate, digits: int = 3) -> str:
    """:func:`fmt` in ``%g`` notation (for quantities spanning decades)."""
    if not e.has_interval:
        return f"{e.mean:.{digits}g}" if math.isfinite(e.mean) else "n/a"
    return f"{e.mean:.{digits}g} [{e.lo:.{digits}g}, {e.hi:.{digits}g}]"


def as_dict(e: Estimate) -> dict:
    """JSON form of an estimate."""
    return {"mean": e.mean, "lo": e.lo, "hi": e.hi, "n": e.n, "interval": e.method, "values": list(e.values)}


def stats_json(stats: dict) -> dict:
    """JSON form of per-variant statistics (variant -> name -> an estimate or a plain value)."""
    return {v: {k: (as_dict(x) if hasattr(x, "mean") else x) for k, x in s.items()} for v, s in stats.items()}


def page_head(title: str, claim: str, verdict: str, after: str) -> list[str]:
    """A study page's first lines: its title, then the claim with the verdict in bold (``verdict``: the bold text
    after ``Verdict: ``; ``after``: what follows it on the line)."""
    return [f"# {title}", "", f"**Claim** ({claim}). **Verdict: {verdict}**{after}", ""]


def pyplot():
    """matplotlib's pyplot, drawing to files only (the Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_seeds(ax, evals: list[list], x: int, color: str, label: str, x_scale: float | None = None) -> None:
    """The evaluation reward (column 3 of each evaluation row) against column ``x`` (divided by ``x_scale``), its mean
    over the seeds' runs (``evals``: one list of rows per seed, cut to the shortest) with a 95% band."""
    n = min(len(e) for e in evals)
    xs = np.array([row[x] for row in evals[0][:n]])
    if x_scale is not None:
        xs = xs / x_scale
    ys = np.array([[row[3] for row in e[:n]] for e in evals])
    lo, hi = curve_interval(ys) if len(evals) > 1 else (ys[0], ys[0])
    ax.plot(xs, ys.mean(0), marker="o", ms=3, color=color, label=label)
    ax.fill_between(xs, lo, hi, color=color, alpha=0.15, lw=0)


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def saved(path: Path, key: dict, compute: Callable[[], dict]) -> dict:
    """``compute()`` once: its JSON-ready result is kept at ``path`` with ``key`` (the settings that produced it) and
    returned again, without recomputing, while the key is the same. A full study takes hours of a shared CPU; stopped
    midway, its rerun resumes at the first run it had not finished, and a changed setting recomputes the runs it
    touches."""
    import json

    if path.exists():
        stored = json.loads(path.read_text())
        if stored.get("key") == json.loads(json.dumps(key)):
            return stored["result"]
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "result": result}))
    tmp.replace(path)  # never a half-written file for a later rerun to read
    return result
