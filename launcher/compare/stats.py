"""Means over seeds with a confidence interval, and the test that calls a difference significant.

- :func:`estimate`: the mean of per-seed values with a two-sided interval at ``confidence`` (0.95). Below
  ``BOOTSTRAP_FROM_SEEDS`` seeds (and with ``--interval t``) it is Student's t interval,
  ``mean ± t_{(1+c)/2, n-1} · s / sqrt(n)`` with ``s`` the sample standard deviation (ddof 1): exact for normally
  distributed seed outcomes and honest about small n (2 seeds: t = 12.7). From ``BOOTSTRAP_FROM_SEEDS`` seeds on
  (and with ``--interval bootstrap``) it is the percentile bootstrap over seeds: resample the seeds with replacement
  ``BOOTSTRAP_SAMPLES`` times, take the mean of each resample, and the interval is the (1-c)/2 and (1+c)/2 quantiles
  of those means (Efron & Tibshirani 1993, ch. 13); it assumes no distribution, but under-covers for few seeds,
  hence t below 10. One seed has no interval.
- :func:`t_quantile`: exact for integer degrees of freedom, by inverting the closed-form Student t distribution
  function (Abramowitz & Stegun 26.7.3-26.7.4), so no statistics package is needed.
- :func:`verdict`: two estimates differ significantly when their intervals do not overlap. This is conservative:
  non-overlap of two 95% intervals implies a difference at well below the 5% level (about p < 0.006 for equal
  standard errors), so "not significant" means "not shown", not "equal".
- :func:`ratio_interval`: every ratio of a value in one interval to a value in the other; it excludes 1 exactly when
  the two intervals do not overlap, so a speedup's interval and its verdict always agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

INTERVALS = ("auto", "t", "bootstrap")
BOOTSTRAP_FROM_SEEDS = 10  # --interval auto: t below this many seeds, the bootstrap from here on
BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_SEED = 0  # fixed, so the same runs always give the same report

SIGNIFICANT = "significant"
NOT_SIGNIFICANT = "not significant"
UNTESTED = "untested"  # a side has one seed: no interval, nothing to test


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its interval; ``lo``/``hi`` are NaN when there is none (fewer than 2 seeds)."""

    mean: float
    lo: float
    hi: float
    n: int
    method: str  # "t", "bootstrap", or "none"
    std: float  # sample standard deviation over seeds (ddof 1), NaN below 2 seeds
    values: tuple[float, ...] = ()

    @property
    def has_interval(self) -> bool:
        return self.method != "none" and math.isfinite(self.lo) and math.isfinite(self.hi)


def _two_sided_cdf(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3 odd df, 26.7.4 even df)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    total, term = 1.0, 1.0
    if df % 2:
        if df == 1:
            return 2.0 * theta / math.pi
        for k in range(1, (df - 3) // 2 + 1):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2.0 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    for k in range(1, (df - 2) // 2 + 1):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


@cache
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``df`` >= 1 degrees of freedom, to double precision."""
    if not 0.5 < p < 1.0 or df < 1 or int(df) != df:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and an integer df >= 1 (got p={p}, df={df})")
    coverage = 2.0 * p - 1.0  # P(|T| <= q) = 2p - 1
    lo, hi = 0.0, 1.0
    while _two_sided_cdf(hi, int(df)) < coverage:
        hi *= 2.0
    for _ in range(200):  # bisection: the distribution function is increasing in t
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if _two_sided_cdf(mid, int(df)) < coverage:
            lo = mid
        else:
            hi = mid
    return hi


def interval_method(n: int, interval: str) -> str:
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {INTERVALS} (got {interval!r})")
    if n < 2:
        return "none"
    if interval == "auto":
        return "t" if n < BOOTSTRAP_FROM_SEEDS else "bootstrap"
    return interval


def estimate(values, confidence: float = 0.95, interval: str = "auto") -> Estimate:
    """Mean of the finite ``values`` (one per seed) with a two-sided ``confidence`` interval (see the module doc)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    n = len(v)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, "none", math.nan)
    mean = float(v.mean())
    std = float(v.std(ddof=1)) if n > 1 else math.nan
    method = interval_method(n, interval)
    if method == "t":
        half = t_quantile((1.0 + confidence) / 2.0, n - 1) * std / math.sqrt(n)
        lo, hi = mean - half, mean + half
    elif method == "bootstrap":
        lo, hi = bootstrap_interval(v, confidence)
    else:
        lo = hi = math.nan
    return Estimate(mean, lo, hi, n, method, std, tuple(v.tolist()))


def bootstrap_interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over seeds."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    idx = rng.integers(0, len(values), size=(BOOTSTRAP_SAMPLES, len(values)))
    means = values[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return float(lo), float(hi)


def curve_interval(ys: np.ndarray, confidence: float = 0.95, interval: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Pointwise interval of the mean over seeds of ``ys`` (seeds x points), by the same rule as :func:`estimate`."""
    n = len(ys)
    mean = ys.mean(axis=0)
    method = interval_method(n, interval)
    if method == "none":
        return mean.copy(), mean.copy()
    if method == "t":
        half = t_quantile((1.0 + confidence) / 2.0, n - 1) * ys.std(axis=0, ddof=1) / math.sqrt(n)
        return mean - half, mean + half
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    idx = rng.integers(0, n, size=(BOOTSTRAP_SAMPLES, n))
    means = ys[idx].mean(axis=1)  # resamples x points
    lo, hi = np.quantile(means, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0], axis=0)
    return lo, hi


def verdict(a: Estimate, b: Estimate) -> str:
    """``significant`` when the intervals of ``a`` and ``b`` do not overlap, ``not significant`` when they do,
    ``untested`` when either has no interval."""
    if not (a.has_interval and b.has_interval):
        return UNTESTED
    overlap = a.lo <= b.hi and b.lo <= a.hi
    return NOT_SIGNIFICANT if overlap else SIGNIFICANT


def ratio_interval(num: Estimate, den: Estimate) -> tuple[float, float]:
    """[num.lo / den.hi, num.hi / den.lo] for positive quantities (compute amounts); a bound at or below zero in the
    denominator makes the upper end infinite. NaN when either side has no interval."""
    if not (num.has_interval and den.has_interval):
        return math.nan, math.nan
    lo = max(num.lo, 0.0) / den.hi if den.hi > 0 else math.inf
    hi = num.hi / den.lo if den.lo > 0 else math.inf
    return lo, hi
