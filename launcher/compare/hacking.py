"""Reward hacking in plain sight: each group's training reward against every held-out score, with intervals.

Reward hacking, the most reported failure of these methods (docs/comparing.md#reward-hacking), shows as the
training reward rising while what it stands for does not: another reward on held-out prompts falls, or the
diversity of a prompt's samples collapses. For every group this module measures, per seed, how much each score
changed over the run, then the mean change over seeds with the one interval used everywhere (Student's t over
seeds, :mod:`launcher.compare.stats`):

- the training reward ``reward/mean``: the mean of its last ``SMOOTH_TRAINING`` logged steps minus the mean of its
  first ``SMOOTH_TRAINING`` (one step's batch is small and noisy, as for the compared metric: metric.py);
- each held-out score ``eval/<name>/mean`` (other rewards, the trained reward on held-out prompts, ``diversity``):
  its last evaluation minus its first (the first is at step 0 by default: the pretrained model). An evaluation is
  already a mean over fixed prompts and noise, so it is not smoothed.

A group is flagged (finding ``reward_hacking``) when the training reward's interval lies above 0 and some held-out
score's interval lies below 0. With one seed there is no interval: such a group is named as *not tested* when its
changes point that way, so a single run's hacking still shows, labelled for what it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from launcher.compare import stats
from launcher.compare.metric import SMOOTH_TRAINING, eval_keys
from launcher.compare.runs import REWARD, RunData
from launcher.compare.stats import Estimate

if TYPE_CHECKING:
    from launcher.compare.aggregate import GroupResult

KIND = "reward_hacking"


@dataclass(frozen=True)
class ScoreChanges:
    """One group's changes over the run: the training reward's and each held-out score's, over seeds."""

    label: str
    train: Estimate
    held_out: dict[str, Estimate]  # eval/<name>/mean -> its change

    def falling(self) -> list[str]:
        """The held-out scores whose change's interval lies below 0."""
        return [k for k, e in self.held_out.items() if e.has_interval and e.hi < 0]

    def falling_untested(self) -> list[str]:
        """With one seed: the held-out scores that went down (no interval)."""
        return [k for k, e in self.held_out.items() if e.n == 1 and e.mean < 0]


def train_change(run: RunData, window: int = SMOOTH_TRAINING) -> float:
    """The training reward's last ``window`` logged steps' mean minus its first ``window``'s (NaN without 2 of them)."""
    y = run.series(REWARD)
    y = y[np.isfinite(y)]
    if len(y) < 2:
        return float("nan")
    k = max(1, min(window, len(y) // 2))
    return float(y[-k:].mean() - y[:k].mean())


def held_out_change(run: RunData, key: str) -> float:
    """The last evaluation of ``key`` minus the first (NaN without 2 evaluations)."""
    y = run.series(key)
    y = y[np.isfinite(y)]
    return float(y[-1] - y[0]) if len(y) >= 2 else float("nan")


def changes(label: str, runs: list[RunData], keys: list[str], confidence: float) -> ScoreChanges:
    est = lambda values: stats.estimate(values, confidence)  # noqa: E731
    return ScoreChanges(
        label,
        est([train_change(r) for r in runs]),
        {k: est([held_out_change(r, k) for r in runs]) for k in keys},
    )


def all_changes(groups: list[GroupResult], confidence: float) -> list[ScoreChanges]:
    """Every group's changes; empty when no run logged a held-out score (nothing to set the training reward against)."""
    keys = eval_keys([r for g in groups for r in g.runs])
    return [changes(g.label, g.runs, keys, confidence) for g in groups] if keys else []


def _fmt(e: Estimate) -> str:
    if e.has_interval:
        return f"{e.mean:+.4g} [{e.lo:+.4g}, {e.hi:+.4g}]"
    return f"{e.mean:+.4g}" if np.isfinite(e.mean) else "n/a"


def table(rows: list[ScoreChanges]) -> tuple[list[str], list[list[str]]]:
    """Training reward against held-out scores: one row per group, the change over the run of each."""
    keys = list(rows[0].held_out) if rows else []
    header = ["group", f"Δ {REWARD} (training)", *[f"Δ {k}" for k in keys], "hacking?"]
    body = []
    for r in rows:
        if r.train.has_interval and r.train.lo > 0 and r.falling():
            flag = "yes"
        elif r.train.n == 1 and r.train.mean > 0 and r.falling_untested():
            flag = "untested (1 seed)"
        else:
            flag = "no"
        body.append([r.label, _fmt(r.train), *[_fmt(r.held_out[k]) for k in keys], flag])
    return header, body


def findings(rows: list[ScoreChanges], confidence: float) -> list[tuple[str, str]]:
    """``(kind, message)`` per flagged group, for the thin-evidence warnings (evidence.py)."""
    conf = f"{round(confidence * 100):g}%"
    out = []
    for r in rows:
        if r.train.has_interval and r.train.lo > 0 and (fell := r.falling()):
            what = "; ".join(f"{k} {_fmt(r.held_out[k])}" for k in fell)
            out.append(
                (
                    KIND,
                    f"{r.label}: the training reward rose ({REWARD} {_fmt(r.train)}, change over the run with its "
                    f"{conf} interval over {r.train.n} seeds) while held-out scores fell: {what}. The method may be "
                    f"exploiting the trained reward (reward hacking): look at the evaluation images (samples/eval_*.png), "
                    f"compare an earlier checkpoint (rewardflow-eval evaluate.weights=<run dir>), and consider a KL "
                    f"term, a lower learning rate or fewer steps.",
                )
            )
        elif r.train.n == 1 and r.train.mean > 0 and (fell := r.falling_untested()):
            what = "; ".join(f"{k} {_fmt(r.held_out[k])}" for k in fell)
            out.append(
                (
                    KIND,
                    f"{r.label} (1 seed, not tested: no interval): the training reward rose ({REWARD} "
                    f"{_fmt(r.train)}) while held-out scores went down: {what}. Run more seeds (trainer.seed=0,1,2) "
                    f"to tell reward hacking from noise.",
                )
            )
    return out
