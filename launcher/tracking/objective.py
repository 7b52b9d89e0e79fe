"""The value a run returns to a sweeper: the last logged value of ``trainer.objective`` (docs/tuning.md#the-objective).

By default that is the final held-out evaluation's score of the trained reward (``eval/<reward>/mean`` at step
``trainer.steps``), not the last training step's ``reward/mean``, which scores one small batch of the method's own
samples. A sweeper that optimises what a run returns (Optuna, ...) gets its checks before the first trial
(launcher/cluster/sweep_check.py): :func:`objective_problem` says why a config's objective would never be logged.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from launcher.tracking.metric_names import evaluation_metrics, is_evaluation, is_metric_name

KEY = "trainer.objective"
DIRECTION_KEY = "trainer.objective_direction"


def objective_value(history: Iterable[dict], key: str) -> float:
    """The last value of ``key`` in the logged rows ``history`` (an evaluation's row or a training step's), as a
    float; NaN when it was never logged or its last value is not finite (logged as null)."""
    value = None
    for row in history:
        if key in row:
            value = row[key]
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def name_problem(key: str) -> str | None:
    """Why ``key`` cannot be an objective because it is not a metric rewardflow logs (None if it can be)."""
    if is_metric_name(key):
        return None
    return (
        f"{key!r} is not a metric rewardflow logs (docs/metrics.md). Fix: {KEY}=eval/<reward>/mean (the final held-out "
        f"evaluation's score, the default), or a training metric such as {KEY}=reward/mean (the last step's)"
    )


def objective_problem(cfg: Any) -> str | None:
    """Why the run of config ``cfg`` (the job's config, or its typed object) would never log ``trainer.objective``
    (None if it will, as far as the config tells: a training metric of another method is only known once logged)."""
    key = str(cfg.trainer.objective)
    problem = name_problem(key)
    if problem is not None:
        return f"{KEY}: {problem}"
    if not is_evaluation(key):
        return None
    logged = evaluation_metrics(cfg)
    if key in logged:
        return None
    if not logged:
        why = "eval.every=0 runs no held-out evaluation"
        fix = "eval.every=N with held-out prompts (eval.prompts=... or eval.split=N; docs/evaluation.md)"
    elif key.startswith("val/") and not cfg.eval.val_split:
        why = "eval.val_split=0 scores no validation prompts"
        fix = "eval.val_split=N"
    else:
        why = f"the evaluation logs {', '.join(m for m in logged if m.endswith('/mean'))} (and their /std)"
        fix = f"{KEY}={logged[0]}, or score that reward too with +reward@eval.rewards.<name>=<option>"
    return (
        f"{KEY}={key} is an evaluation metric, and {why}, so every run would return NaN to the sweeper. "
        f"Fix: {fix}; or {KEY}=reward/mean to optimise the last training step's reward"
    )
