"""Means over seeds with a confidence interval, paired differences between methods, and Holm's correction.

One interval method everywhere (issue 25): Student's t over seeds, quantiles from ``scipy.stats.t``; no switch to a
bootstrap at any number of seeds (a percentile bootstrap over 10 seeds under-covers; Efron & Tibshirani 1993,
ch. 13).

- :func:`estimate`: the mean of per-seed values with a two-sided interval at ``confidence`` (0.95),
  ``mean ± t_{(1+c)/2, n-1} · s / sqrt(n)`` with ``s`` the sample standard deviation (ddof 1). A quantity that is
  positive by nature (a time, a compute amount, a ratio: ``positive=True``) gets its interval on the log scale:
  the t interval of the logs, exponentiated, around the geometric mean, so no end is ever at or below 0. One seed
  has no interval.
- :func:`paired`: two methods trained with the same seeds are compared seed by seed: the t interval and the
  two-sided p-value (``scipy.stats.ttest_1samp``) of the per-seed differences (of the per-seed log-ratios for a
  positive quantity, so the estimate is a ratio).
- :func:`holm`: Holm's step-down adjustment of the p-values of the methods compared with one baseline
  (Holm 1979, Scand. J. Statist. 6:65-70): it holds the family-wise error at ``1 - confidence`` over all methods.
- :func:`verdict`: ``significant`` when the Holm-adjusted p-value is below ``1 - confidence``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95  # the default confidence of every interval (rewardflow-compare --confidence)
METHOD = "Student's t over seeds"  # what every page and report states
LOG_METHOD = "Student's t over seeds on the log scale"

SIGNIFICANT = "significant"
NOT_SIGNIFICANT = "not significant"
UNTESTED = "untested"  # fewer than 2 paired seeds: nothing to test


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its interval; ``lo``/``hi`` are NaN when there is none (fewer than 2 seeds).

    ``method``: ``t``, ``log-t`` (a positive quantity: ``mean`` is the geometric mean) or ``none``. ``p``: for a
    paired difference, the two-sided p-value of "no difference" (NaN otherwise)."""

    mean: float
    lo: float
    hi: float
    n: int
    method: str
    std: float  # sample standard deviation over seeds (ddof 1; of the logs for log-t), NaN below 2 seeds
    values: tuple[float, ...] = ()
    p: float = math.nan

    @property
    def has_interval(self) -> bool:
        return self.method != "none" and math.isfinite(self.lo) and math.isfinite(self.hi)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``scipy.stats.t.ppf``)."""
    if not 0.5 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1 (got p={p}, df={df})")
    return float(sps.t.ppf(p, df))


def _finite(values) -> np.ndarray:
    return np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)


def _t(v: np.ndarray, confidence: float) -> tuple[float, float, float, float]:
    """mean, lo, hi, std of the t interval of ``v`` (n >= 2)."""
    mean, std = float(v.mean()), float(v.std(ddof=1))
    half = t_quantile((1.0 + confidence) / 2.0, len(v) - 1) * std / math.sqrt(len(v))
    return mean, mean - half, mean + half, std


def estimate(values, confidence: float = CONFIDENCE, positive: bool = False) -> Estimate:
    """Mean of the finite ``values`` (one per seed) with a two-sided ``confidence`` t interval; ``positive``: on the
    log scale (every value must be > 0)."""
    v = _finite(values)
    n = len(v)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, "none", math.nan)
    if positive and (v <= 0).any():
        raise ValueError(f"a positive quantity has a value <= 0 ({v.min():g}); its log-scale interval is undefined")
    if n == 1:
        return Estimate(float(v[0]), math.nan, math.nan, 1, "none", math.nan, (float(v[0]),))
    if positive:
        mean, lo, hi, std = _t(np.log(v), confidence)
        return Estimate(math.exp(mean), math.exp(lo), math.exp(hi), n, "log-t", std, tuple(v.tolist()))
    mean, lo, hi, std = _t(v, confidence)
    return Estimate(mean, lo, hi, n, "t", std, tuple(v.tolist()))


def curve_interval(ys: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise t interval of the mean over seeds of ``ys`` (seeds x points)."""
    n = len(ys)
    mean = ys.mean(axis=0)
    if n < 2:
        return mean.copy(), mean.copy()
    half = t_quantile((1.0 + confidence) / 2.0, n - 1) * ys.std(axis=0, ddof=1) / math.sqrt(n)
    return mean - half, mean + half


def paired(a: dict, b: dict, confidence: float = CONFIDENCE, ratio: bool = False) -> Estimate:
    """``a - b`` seed by seed (``ratio``: ``a / b``, on the log scale) over the seeds both have (dicts seed ->
    value), with its t interval and the two-sided p-value of no difference."""
    seeds = [s for s in a if s in b and _ok(a[s], ratio) and _ok(b[s], ratio)]
    if ratio:
        d = np.array([math.log(a[s] / b[s]) for s in seeds], dtype=np.float64)
    else:
        d = np.array([a[s] - b[s] for s in seeds], dtype=np.float64)
    values = tuple(np.exp(d).tolist() if ratio else d.tolist())
    if len(d) < 2:
        mean = (math.exp(d[0]) if ratio else float(d[0])) if len(d) else math.nan
        return Estimate(mean, math.nan, math.nan, len(d), "none", math.nan, values)
    mean, lo, hi, std = _t(d, confidence)
    if std == 0.0:  # identical differences: certain when non-zero (scipy returns NaN here)
        p = 1.0 if mean == 0.0 else 0.0
    else:
        p = float(sps.ttest_1samp(d, 0.0).pvalue)
    if ratio:
        mean, lo, hi = math.exp(mean), math.exp(lo), math.exp(hi)
    return Estimate(mean, lo, hi, len(d), "log-t" if ratio else "t", std, values, p)


def _ok(x, ratio: bool) -> bool:
    return x is not None and math.isfinite(x) and (x > 0 or not ratio)


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given; NaN (untested) stays NaN and does not count in the family.

    Sorted ascending, the i-th (0-based) of m is multiplied by m - i, then made non-decreasing and cut at 1."""
    tested = sorted((p, i) for i, p in enumerate(pvalues) if math.isfinite(p))
    m = len(tested)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def verdict(p_adjusted: float, confidence: float = CONFIDENCE) -> str:
    """``significant`` when the Holm-adjusted p-value is below ``1 - confidence``; ``untested`` without one."""
    if not math.isfinite(p_adjusted):
        return UNTESTED
    return SIGNIFICANT if p_adjusted < 1.0 - confidence else NOT_SIGNIFICANT


def bounded(e: Estimate | None) -> bool:
    """An estimate worth printing as a number: a finite mean and, when it has an interval, finite positive ends for
    a ratio. A ratio whose interval is unbounded (or reaches 0) is "no estimate" (report.py)."""
    if e is None or not math.isfinite(e.mean):
        return False
    if e.method == "log-t":
        return 0.0 < e.lo and math.isfinite(e.hi)
    return True
