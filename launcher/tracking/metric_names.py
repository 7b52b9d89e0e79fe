"""Which logged metrics an evaluation writes: one rule for the run log (launcher/tracking/run_logger.py, which tells
an evaluation's row from a training row when it resumes) and for ``rewardflow-compare`` (launcher/compare/runs.py,
which plots them against the compute before the evaluation). See docs/evaluation.md#what-a-run-logs."""

from __future__ import annotations

#: the prefixes of the metrics an evaluation logs: the held-out prompts (``eval/*``) and ``eval.val_split``'s
#: validation prompts (``val/*``)
EVALUATION_PREFIXES = ("eval/", "val/")


def is_evaluation(metric_key: str) -> bool:
    """Whether ``metric_key`` is logged by an evaluation (``eval/*``, ``val/*``), at the compute before it."""
    return metric_key.startswith(EVALUATION_PREFIXES)


def is_evaluation_row(row: dict) -> bool:
    """Whether a logged row is an evaluation's: it holds an evaluation metric (a training row never does)."""
    return any(is_evaluation(k) for k in row)
