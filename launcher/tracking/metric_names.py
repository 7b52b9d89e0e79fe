"""Which logged metrics an evaluation writes: one rule for the run log (launcher/tracking/run_logger.py, which tells
an evaluation's row from a training row when it resumes) and for ``rewardflow-compare`` (launcher/compare/runs.py,
which plots them against the compute before the evaluation). See docs/evaluation.md#what-a-run-logs."""

from __future__ import annotations

from typing import Any

#: the prefixes of the metrics an evaluation logs: the held-out prompts (``eval/*``) and ``eval.val_split``'s
#: validation prompts (``val/*``)
EVALUATION_PREFIXES = ("eval/", "val/")


def is_evaluation(metric_key: str) -> bool:
    """Whether ``metric_key`` is logged by an evaluation (``eval/*``, ``val/*``), at the compute before it."""
    return metric_key.startswith(EVALUATION_PREFIXES)


def is_evaluation_row(row: dict) -> bool:
    """Whether a logged row is an evaluation's: it holds an evaluation metric (a training row never does)."""
    return any(is_evaluation(k) for k in row)


#: the namespaces of the metrics a training step logs (docs/metrics.md), and its metrics outside any namespace
TRAINING_PREFIXES = (
    "reward/",
    "adv/",
    "policy/",
    "health/",
    "time/",
    "memory/",
    "count/",
    "jagg/",
    "flash/",
    "soc/",
    "nft/",
)
TRAINING_METRICS = ("loss", "grad_norm", "lr")
STATISTICS = ("mean", "std")


def evaluation_metrics(cfg: Any) -> list[str]:
    """The evaluation metrics a run with config ``cfg`` logs: ``eval/<reward>/mean|std`` for the trained reward and
    each of ``eval.rewards`` when ``eval.every`` > 0, and ``val/<...>`` too with ``eval.val_split`` > 0 (the row of
    launcher/train/evaluation.py)."""
    e = cfg.eval
    if not e.every:
        return []
    names = [str(cfg.reward.name), *[str(n) for n in (e.rewards or {})]]
    prefixes = ["eval"] + (["val"] if e.val_split else [])
    return [f"{p}/{n}/{s}" for p in prefixes for n in names for s in STATISTICS]


def is_metric_name(key: str) -> bool:
    """Whether ``key`` is shaped like a metric rewardflow logs (docs/metrics.md): a training metric's namespace or
    name, or an evaluation's ``eval/<reward>/mean|std`` / ``val/<reward>/mean|std``."""
    if is_evaluation(key):
        parts = key.split("/")
        return len(parts) == 3 and bool(parts[1]) and parts[2] in STATISTICS
    return key in TRAINING_METRICS or (key.startswith(TRAINING_PREFIXES) and not key.endswith("/"))
