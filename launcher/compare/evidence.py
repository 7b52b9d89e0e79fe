"""Warnings for thin evidence: what in a comparison makes its numbers less sure than they look.

Each check has a threshold that is a command-line option (``docs/compare_report.md`` lists them):

- ``training_reward``: the metric is the training reward, not a held-out evaluation (no common ruler);
- ``few_seeds``: a group has fewer than ``--min-seeds`` (2) seeds: no interval, no test, no load check;
- ``few_points``: a run has fewer than ``--min-points`` (5) logged points of the metric (evaluations, or steps for
  the training reward): its curve, compute to reach and value at the budget rest on that few points;
- ``short_window``: a run has fewer points than the smoothing window ``--smooth``: its final value averages fewer
  points than asked for (the report's titles give the window actually used);
- ``step_time_spread``: the seeds of one group took different times per step, the coefficient of variation (sample
  std / mean) of their mean seconds per step above ``--max-step-cv`` (0.05): seeds of one setting do the same work,
  so the machine's speed changed between them (other load, other hardware), and wall-clock and GPU-hour figures
  carry that noise;
- ``unfinished``: runs whose last step is below their ``trainer.steps``, crashed or still running (named; left out
  unless ``--include-unfinished``);
- ``reached_at_first``: a seed was at the target at its first logged point, so when it got there is not measured;
- ``reward_hacking``: a group's training reward rose while a held-out score (another reward, the trained one on held-out
  prompts, diversity) fell, each change's interval away from 0 (hacking.py; with one seed: named as not tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from launcher.compare import hacking
from launcher.compare.runs import REWARD, STEP_TIME

if TYPE_CHECKING:
    from launcher.compare.aggregate import Comparison


@dataclass(frozen=True)
class Thresholds:
    min_seeds: int = 2  # --min-seeds: warn when a group has fewer seeds
    min_points: int = 5  # --min-points: warn when a run has fewer logged points of the metric
    max_step_cv: float = 0.05  # --max-step-cv: warn when a group's seeds' s/step vary more (std / mean)


@dataclass(frozen=True)
class Finding:
    kind: str
    message: str


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _listing(items: list[str], limit: int = 6) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def check(c: Comparison, th: Thresholds) -> list[Finding]:
    out: list[Finding] = []
    if c.incomplete:
        names = [i.describe() for i in c.incomplete]
        if c.settings.include_unfinished:
            what = "are compared anyway (--include-unfinished): their curves stop early and may set the budget"
        else:
            what = "are left out of every figure; --include-unfinished compares them too"
        out.append(Finding("unfinished", f"{_plural(len(names), 'run')} did not finish and {what}: {_listing(names)}"))
    m = c.metric
    if m.key == REWARD:
        out.append(
            Finding(
                "training_reward",
                (
                    "compared on reward/mean, the training reward, not a held-out evaluation: each method scores its own "
                    "training samples (its sampler and noise, one batch per step), so the methods are not measured with "
                    "the same ruler. Turn evaluation on (eval.every=N) to compare on eval/<reward>/mean."
                ),
            )
        )

    thin = [r for r in c.groups if len(r.runs) < th.min_seeds]
    if thin:
        one = [r.label for r in thin if len(r.runs) == 1]
        few = [f"{r.label} ({len(r.runs)})" for r in thin if len(r.runs) > 1]
        parts = []
        if one:
            parts.append(
                f"{_listing(one)} {'has' if len(one) == 1 else 'have'} 1 seed: no interval, no "
                f"significance test and no check of the machine's load for {'it' if len(one) == 1 else 'them'}"
                f"; each figure is a single run"
            )
        if few:
            parts.append(f"{_listing(few)} {'has' if len(few) == 1 else 'have'} few seeds: wide intervals")
        out.append(
            Finding(
                "few_seeds",
                f"{'; '.join(parts)} (fewer than --min-seeds {th.min_seeds}). Run more seeds, e.g. trainer.seed=0,1,2.",
            )
        )

    unit = "evaluation points" if m.held_out else "logged steps"
    short = [(r.label, t) for r in c.groups for t in r.traces if t.points < th.min_points]
    if short:
        counts = sorted({t.points for _, t in short})
        fix = "run longer, or evaluate more often (eval.every)" if m.held_out else "run longer"
        out.append(
            Finding(
                "few_points",
                (
                    f"{_plural(len(short), 'run')} {'has' if len(short) == 1 else 'have'} fewer than --min-points "
                    f"{th.min_points} {unit} ({'–'.join(map(str, (counts[0], counts[-1]))) if len(counts) > 1 else counts[0]}"
                    f": {_listing(sorted({label for label, _ in short}))}): their curves, compute to reach and value at "
                    f"the budget rest on that few points. Fix: {fix}."
                ),
            )
        )

    if c.smooth > 1:
        under = [(r.label, t) for r in c.groups for t in r.traces if t.points < c.smooth]
        if under:
            windows = sorted({t.window for _, t in under})
            shown = str(windows[0]) if len(windows) == 1 else f"{windows[0]}–{windows[-1]}"
            out.append(
                Finding(
                    "short_window",
                    (
                        f"--smooth {c.smooth} is longer than {_plural(len(under), 'run')} "
                        f"({_listing(sorted({label for label, _ in under}))}): their final value is the mean of the last "
                        f"{shown} {m.point}s, not {c.smooth} (the titles say so)."
                    ),
                )
            )

    spread = []
    for r in c.groups:
        v = r.per_step[STEP_TIME].values  # the seeds' mean s/step
        cv = float(np.std(v, ddof=1) / np.mean(v)) if len(v) >= 2 and np.mean(v) > 0 else 0.0
        if cv > th.max_step_cv:
            spread.append(f"{r.label} ({cv:.1%})")
    if spread:
        out.append(
            Finding(
                "step_time_spread",
                (
                    f"the seeds of {_listing(spread)} differ in seconds per step by more than --max-step-cv "
                    f"{th.max_step_cv:g} (coefficient of variation of their s/step in parentheses): seeds of one setting do "
                    f"the same work, so the machine's speed changed between them (other load, other hardware), and the "
                    f"wall-clock and GPU-hour figures carry that noise. Compare on --axis step, or re-run on an otherwise "
                    f"idle machine."
                ),
            )
        )

    early = [f"{r.label} ({r.reached_at_first} of {len(r.runs)})" for r in c.groups if r.reached_at_first]
    if early:
        out.append(
            Finding(
                "reached_at_first",
                (
                    f"{_listing(early)} {'was' if len(early) == 1 else 'were'} at the target {c.target:.4f} at the first "
                    f"logged point of some seeds (seeds in parentheses): when they got there is not measured, so their "
                    f"compute to reach is an upper bound and the speedups that use it are bounds, not measurements. Fix: "
                    f"a higher --target."
                ),
            )
        )
    out += [Finding(kind, message) for kind, message in hacking.findings(c.hacking, c.settings.confidence)]
    return out
