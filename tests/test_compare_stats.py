"""The interval statistics of rewardflow-compare (launcher/compare/stats.py), in float64, against references computed
here independently: Student's t quantiles from closed forms and from numerically integrating the t density, the
t-interval from its formula, the coverage of the intervals by simulation, the bootstrap against the normal
approximation of the bootstrap distribution of a mean, and the overlap test."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from launcher.compare import stats


def _t_cdf_numeric(q: float, df: int) -> float:
    """P(T <= q) by Simpson's rule on the t density over [0, q] (the density is symmetric), in float64."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    x = np.linspace(0.0, q, 200_001)
    f = np.exp(log_norm - (df + 1) / 2 * np.log1p(x * x / df))
    h = x[1] - x[0]
    simpson = h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return 0.5 + float(simpson)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 7, 8, 9, 12, 29, 100])
@pytest.mark.parametrize("p", [0.9, 0.975, 0.995])
def test_t_quantile_inverts_the_t_distribution(df, p):
    q = stats.t_quantile(p, df)
    assert _t_cdf_numeric(q, df) == pytest.approx(p, abs=1e-9)


def test_t_quantile_closed_forms_and_the_normal_limit():
    for p in (0.9, 0.975, 0.995):
        # df 1 is the Cauchy distribution: q = tan(pi (p - 1/2)); df 2: q = (2p - 1) sqrt(2 / (1 - (2p - 1)^2))
        assert stats.t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-13)
        a = 2 * p - 1
        assert stats.t_quantile(p, 2) == pytest.approx(a * math.sqrt(2 / (1 - a * a)), rel=1e-13)
        # many degrees of freedom: close to the normal quantile, from above
        z = NormalDist().inv_cdf(p)
        assert z < stats.t_quantile(p, 2000) < z * 1.001
    with pytest.raises(ValueError):
        stats.t_quantile(0.4, 3)
    with pytest.raises(ValueError):
        stats.t_quantile(0.975, 0)


def test_t_interval_is_mean_plus_minus_t_times_the_standard_error():
    values = [0.71, 0.74, 0.69, 0.80]
    e = stats.estimate(values, 0.95, "auto")
    v = np.array(values)
    half = stats.t_quantile(0.975, 3) * v.std(ddof=1) / math.sqrt(len(v))
    assert e.method == "t" and e.n == 4
    assert (e.mean, e.lo, e.hi, e.std) == pytest.approx(
        (v.mean(), v.mean() - half, v.mean() + half, v.std(ddof=1)), rel=1e-14
    )
    # 90%: a narrower interval, with the 0.95 quantile
    e90 = stats.estimate(values, 0.90, "t")
    assert e90.hi - e90.mean == pytest.approx(stats.t_quantile(0.95, 3) * v.std(ddof=1) / 2, rel=1e-14)
    # NaN values (a seed without the figure) are left out; one value has no interval
    assert stats.estimate([0.5, math.nan, 0.7]).n == 2
    one = stats.estimate([0.5])
    assert (one.mean, one.method, one.has_interval) == (0.5, "none", False) and math.isnan(one.lo)
    assert stats.estimate([]).n == 0


@pytest.mark.parametrize("n", [2, 3, 5])
def test_t_interval_covers_the_true_mean_95_percent_of_the_time(n):
    rng = np.random.default_rng(1)
    trials = 20_000
    samples = rng.normal(loc=0.8, scale=0.05, size=(trials, n))
    covered = 0
    for row in samples:
        e = stats.estimate(row, 0.95, "t")
        covered += e.lo <= 0.8 <= e.hi
    se = math.sqrt(0.95 * 0.05 / trials)  # 0.0015
    assert abs(covered / trials - 0.95) < 4 * se


def test_bootstrap_from_ten_seeds_on_and_its_width():
    assert stats.interval_method(9, "auto") == "t" and stats.interval_method(10, "auto") == "bootstrap"
    assert stats.interval_method(3, "bootstrap") == "bootstrap" and stats.interval_method(30, "t") == "t"
    assert stats.interval_method(1, "bootstrap") == "none"
    values = np.random.default_rng(2).normal(0.8, 0.05, size=40)
    e = stats.estimate(values, 0.95, "auto")
    assert e.method == "bootstrap" and e.mean == pytest.approx(values.mean())
    # the bootstrap distribution of a mean of n values has standard deviation std(ddof=0) / sqrt(n) and, for 40
    # values, is close to normal: the percentile interval is about mean +- z_0.975 of that
    half = NormalDist().inv_cdf(0.975) * values.std(ddof=0) / math.sqrt(len(values))
    assert (e.hi - e.lo) / 2 == pytest.approx(half, rel=0.05)
    assert e.lo < values.mean() < e.hi
    # reproducible: the same values give the same interval
    assert stats.estimate(values) == e


def test_curve_interval_is_the_pointwise_estimate():
    ys = np.random.default_rng(3).normal(0.7, 0.03, size=(12, 5))  # 12 seeds x 5 points
    for interval, rows in (("t", ys[:4]), ("bootstrap", ys)):
        lo, hi = stats.curve_interval(rows, 0.95, interval)
        for j in range(rows.shape[1]):
            e = stats.estimate(rows[:, j], 0.95, interval)
            assert (lo[j], hi[j]) == pytest.approx((e.lo, e.hi), rel=1e-12)
    lo, hi = stats.curve_interval(ys[:1], 0.95, "auto")  # one seed: the curve itself
    assert lo.tolist() == hi.tolist() == ys[0].tolist()


def _e(lo, hi, n=3):
    return stats.Estimate((lo + hi) / 2, lo, hi, n, "t", 0.1)


def test_verdict_is_the_overlap_of_the_intervals():
    assert stats.verdict(_e(1.0, 2.0), _e(2.5, 3.0)) == stats.SIGNIFICANT
    assert stats.verdict(_e(2.5, 3.0), _e(1.0, 2.0)) == stats.SIGNIFICANT
    assert stats.verdict(_e(1.0, 2.0), _e(2.0, 3.0)) == stats.NOT_SIGNIFICANT  # touching counts as overlap
    assert stats.verdict(_e(1.0, 3.0), _e(1.5, 2.0)) == stats.NOT_SIGNIFICANT  # one inside the other
    assert stats.verdict(stats.estimate([1.0]), _e(2.5, 3.0)) == stats.UNTESTED


def test_speedup_interval_excludes_one_exactly_when_the_reach_intervals_do_not_overlap():
    rng = np.random.default_rng(4)
    for _ in range(2000):
        a, b = np.sort(rng.uniform(0.1, 3.0, 2)), np.sort(rng.uniform(0.1, 3.0, 2))
        base, group = _e(*a), _e(*b)
        lo, hi = stats.ratio_interval(base, group)
        assert lo == pytest.approx(a[0] / b[1]) and hi == pytest.approx(a[1] / b[0])
        assert (not lo <= 1 <= hi) == (stats.verdict(group, base) == stats.SIGNIFICANT)
    lo, hi = stats.ratio_interval(_e(1.0, 2.0), _e(-0.5, 1.0))  # a t interval reaching below 0 compute
    assert lo == pytest.approx(1.0) and hi == math.inf
    assert all(math.isnan(x) for x in stats.ratio_interval(stats.estimate([1.0]), _e(1.0, 2.0)))
