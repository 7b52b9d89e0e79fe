"""Which logged metrics an evaluation writes: one rule for the run log (launcher/tracking/run_logger.py, which tells
an evaluation's row from a training row when it resumes) and for ``rewardflow-compare`` (launcher/compare/runs.py,
which plots them against the compute before the evaluation). See docs/evaluation.md#what-a-run-logs.

It also lists every documented metric by family (:data:`FAMILIES`, docs/metrics.md), which ``rewardflow-dashboard``
(launcher/compare/dashboard.py) turns into the sections of a W&B workspace."""

from __future__ import annotations

import re
from dataclasses import dataclass
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


@dataclass(frozen=True)
class MetricFamily:
    """One family of the documented metrics (docs/metrics.md): what ``rewardflow-dashboard`` makes a section of.

    ``metrics`` are fixed names; ``templates`` are names with a part the config chooses, written as in the docs
    (``eval/<reward>/mean``: ``<...>`` is one name without ``/``); ``prefixes`` are method-specific namespaces
    whose names each method documents on its own page (``jagg/``)."""

    key: str
    title: str
    about: str
    metrics: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    cuda_only: bool = False

    def regexes(self) -> tuple[str, ...]:
        """A regular expression per template and prefix, anchored (RE2 syntax, as W&B's ``metric_regex`` takes)."""
        return tuple(template_regex(t) for t in self.templates) + tuple(f"^{re.escape(p)}.+$" for p in self.prefixes)

    def matches(self, key: str) -> bool:
        return key in self.metrics or any(re.fullmatch(r.strip("^$"), key) for r in self.regexes())


def template_regex(template: str) -> str:
    """``eval/<reward>/mean`` -> ``^eval/[^/]+/mean$``."""
    return "^" + "[^/]+".join(re.escape(part) for part in re.split(r"<[^<>/]+>", template)) + "$"


#: the x axes: the step, and the compute axes (registered with ``define_metric``) of training rows and of evaluations
STEP = "step"
COMPUTE_AXES = ("time/wallclock_s", "time/gpu_hours")
EVAL_COMPUTE_AXES = ("time/eval_wallclock_s", "time/eval_gpu_hours")
PHASE_TIMES = ("time/rollout_s", "time/reward_s", "time/update_s")

#: every documented metric by family, in the order a dashboard shows them (docs/metrics.md; a test keeps the two equal)
FAMILIES: tuple[MetricFamily, ...] = (
    MetricFamily(
        "reward",
        "Reward",
        "the training reward of each step's samples (raw, before normalisation), and its components with reward=multi",
        metrics=("reward/mean", "reward/std", "reward/zero_std_frac", "adv/abs_mean"),
        templates=("reward/<component>", "reward/<component>_std"),
    ),
    MetricFamily(
        "evaluation",
        "Held-out evaluation",
        "every method scored alike on held-out prompts (eval/*) and validation prompts (val/*), against the step and "
        "against the compute spent before the evaluation",
        metrics=("time/eval_s", *EVAL_COMPUTE_AXES),
        templates=("eval/<reward>/mean", "eval/<reward>/std", "val/<reward>/mean", "val/<reward>/std"),
    ),
    MetricFamily(
        "policy",
        "Policy update",
        "the loss and the PPO ratio statistics of the step's updates, the gradient norm before clipping, the rate",
        metrics=(
            "loss",
            "policy/clip_frac",
            "policy/approx_kl",
            "policy/ratio_mean",
            "policy/kl_ref",
            "grad_norm",
            "lr",
        ),
    ),
    MetricFamily(
        "time",
        "Time per phase",
        "seconds per step in each phase (rollout, reward, update), and the cumulative compute axes",
        metrics=(*PHASE_TIMES, "time/step_s", *COMPUTE_AXES),
    ),
    MetricFamily(
        "count",
        "Transformer passes",
        "transformer evaluations per step (forward, backward), per sample, summed over ranks: the cost of a step",
        metrics=("count/transformer_fwd", "count/transformer_bwd"),
    ),
    MetricFamily(
        "health",
        "Health",
        "skipped updates (NaN/Inf), the first update's ratio drift and clip fraction, the weights' norm",
        metrics=(
            "health/skipped_updates",
            "health/first_update_ratio_dev_mean",
            "health/first_update_ratio_dev_p50",
            "health/first_update_ratio_dev_p90",
            "health/first_update_ratio_dev_p99",
            "health/first_update_ratio_dev_max",
            "health/first_update_clip_frac",
            "health/weight_norm",
        ),
    ),
    MetricFamily(
        "memory",
        "Memory (CUDA only)",
        "rank 0's peak allocated GPU memory per phase, and the memory plan's figures for the same phases",
        metrics=(
            "memory/rollout_peak_gib",
            "memory/reward_peak_gib",
            "memory/update_peak_gib",
            "memory/planned_rollout_gib",
            "memory/planned_update_gib",
            "memory/planned_peak_gib",
        ),
        cuda_only=True,
    ),
    MetricFamily(
        "method",
        "Method-specific",
        "the metrics of one method: JAGG's diagnostic mode, Flash-GRPO, EAM and Adjoint Matching, DiffusionNFT, "
        "Flow-DPPO, AWM",
        prefixes=("jagg/", "flash/", "soc/", "nft/", "dppo/", "awm/"),
    ),
)


def family_of(metric_key: str) -> MetricFamily | None:
    """The documented family of a logged metric; None for one no family documents (and ``step``)."""
    return next((f for f in FAMILIES if f.matches(metric_key)), None)


STATISTICS = ("mean", "std")


def evaluation_metrics(cfg: Any) -> list[str]:
    """The evaluation metrics a run with config ``cfg`` logs: ``eval/<reward>/mean|std`` for the trained reward and
    each of ``eval.rewards`` when ``eval.every`` > 0, and ``val/<...>`` too with ``eval.val_split`` > 0 (the row of
    launcher/train/evaluation.py)."""
    e = cfg.eval
    if not e.every:
        return []
    names = list(dict.fromkeys([str(cfg.reward.name), *[str(n) for n in (e.rewards or {})]]))  # the trained once
    prefixes = ["eval"] + (["val"] if e.val_split else [])
    return [f"{p}/{n}/{s}" for p in prefixes for n in names for s in STATISTICS]


def is_metric_name(key: str) -> bool:
    """Whether ``key`` is a metric rewardflow logs (docs/metrics.md): a documented metric of :data:`FAMILIES`, or an
    evaluation's ``eval/<reward>/mean|std`` / ``val/<reward>/mean|std``."""
    if is_evaluation(key):
        parts = key.split("/")
        return len(parts) == 3 and bool(parts[1]) and parts[2] in STATISTICS
    return family_of(key) is not None
