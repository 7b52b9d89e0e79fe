"""Which metric a comparison measures: the held-out evaluation when the runs have it, else the training reward.

The trainer's held-out evaluation (``eval/<reward>/mean``) scores fixed prompts from fixed initial noise with the
family's deterministic sampler, the same for every method, seed and step: one ruler for every method. The training
reward (``reward/mean``) scores each method's own training samples (its sampler, its noise, one batch per step), so
two methods' training rewards are not measured the same way; it is the fallback, and the report says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.compare.errors import CompareError
from launcher.compare.runs import REWARD, RunData

EVAL_MEAN = re.compile(r"^eval/(?P<reward>.+)/mean$")
#: any evaluation's mean: held out (eval/) or on the validation prompts (val/, docs/comparing.md#comparison-protocol)
EVALUATION_MEAN = re.compile(r"^(eval|val)/(?P<reward>.+)/mean$")
# the trailing smoothing window (logged points) when --smooth is not given: per-step training rewards are means over
# one small batch and noisy; an evaluation is already a mean over a fixed prompt set, and smoothing it would mix in
# older models
SMOOTH_TRAINING = 10
SMOOTH_EVAL = 1


@dataclass(frozen=True)
class Metric:
    key: str  # the logged metric compared, e.g. eval/color/mean or reward/mean
    held_out: bool  # True for an evaluation's metric: eval/<reward>/mean, or val/<reward>/mean (eval.val_split)
    how_chosen: str  # one sentence for the report: why this metric

    @property
    def point(self) -> str:
        """What one logged value of it is, for titles: an evaluation or a training step."""
        return "evaluation" if self.held_out else "step"

    @property
    def default_smooth(self) -> int:
        return SMOOTH_EVAL if self.held_out else SMOOTH_TRAINING


def eval_keys(runs: list[RunData]) -> list[str]:
    """Every ``eval/<reward>/mean`` key any of the runs logged."""
    return sorted({k for r in runs for row in r.rows for k, v in row.items() if v is not None and EVAL_MEAN.match(k)})


def choose_metric(runs: list[RunData], requested: str = "auto") -> Metric:
    """``--metric auto`` picks ``eval/<trained reward>/mean`` when the runs logged it (or the only ``eval/*/mean``
    they logged), else ``reward/mean``; any other value is used as given. Every run must have the metric."""
    found = eval_keys(runs)
    if requested != "auto":
        _check_all_have(runs, requested, found)
        held_out = bool(EVALUATION_MEAN.match(requested))
        return Metric(requested, held_out, f"`{requested}`, chosen with --metric.")
    if not found:
        return Metric(
            REWARD,
            False,
            "`reward/mean`, the **training reward**: these runs logged no held-out "
            "evaluation (`eval/<reward>/mean`); see the warnings.",
        )
    trained = {f"eval/{r.get('reward.name')}/mean" for r in runs} & set(found)
    if len(found) == 1:
        key = found[0]
    elif len(trained) == 1:
        key = trained.pop()
    else:
        raise CompareError(
            f"these runs logged several held-out metrics ({', '.join(found)}) and none is "
            f"eval/<reward.name>/mean of the trained reward; choose one with --metric "
            f"{found[0]}"
        )
    _check_all_have(runs, key, found)
    return Metric(
        key,
        True,
        f"`{key}`, the held-out evaluation (fixed prompts and initial noise, the family's "
        f"deterministic sampler: the same ruler for every method).",
    )


def _check_all_have(runs: list[RunData], key: str, found: list[str]) -> None:
    lacking = [r for r in runs if not r.has(key)]
    if not lacking:
        return
    names = ", ".join(r.name for r in lacking[:5]) + ("..." if len(lacking) > 5 else "")
    if EVALUATION_MEAN.match(key):
        fix = (
            f"compare every run on the training reward with --metric {REWARD}, or re-run those with "
            f"evaluation on (eval.every=N)"
        )
    else:
        fix = f"choose a metric they all logged with --metric (held-out ones found: {', '.join(found) or 'none'})"
    raise CompareError(
        f"{len(lacking)} of the {len(runs)} runs did not log {key}: {names}. Methods are compared "
        f"on one metric. Fix: {fix}"
    )
