"""The interval statistics of rewardflow-compare (launcher/compare/stats.py), in float64, against references computed
here independently: Student's t quantiles from closed forms and from numerically integrating the t density, the
t-interval from its formula, the coverage of the intervals by simulation, the log-scale interval of positive
quantities, the paired test by seed, and Holm's correction against a hand-worked example."""

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
    e = stats.estimate(values, 0.95)
    v = np.array(values)
    half = stats.t_quantile(0.975, 3) * v.std(ddof=1) / math.sqrt(len(v))
    assert e.method == "t" and e.n == 4
    assert (e.mean, e.lo, e.hi, e.std) == pytest.approx(
        (v.mean(), v.mean() - half, v.mean() + half, v.std(ddof=1)), rel=1e-14
    )
    # 90%: a narrower interval, with the 0.95 quantile
    e90 = stats.estimate(values, 0.90)
    assert e90.hi - e90.mean == pytest.approx(stats.t_quantile(0.95, 3) * v.std(ddof=1) / 2, rel=1e-14)
    # NaN values (a seed without the figure) are left out; one value has no interval
    assert stats.estimate([0.5, math.nan, 0.7]).n == 2
    one = stats.estimate([0.5])
    assert (one.mean, one.method, one.has_interval) == (0.5, "none", False) and math.isnan(one.lo)
    assert stats.estimate([]).n == 0


def test_t_everywhere_even_with_many_seeds():
    """No silent switch to a bootstrap at 10 seeds or more (issue 25): 40 seeds get the t interval too."""
    values = np.random.default_rng(2).normal(0.8, 0.05, size=40)
    e = stats.estimate(values)
    half = stats.t_quantile(0.975, 39) * values.std(ddof=1) / math.sqrt(40)
    assert e.method == "t" and (e.lo, e.hi) == pytest.approx((values.mean() - half, values.mean() + half), rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_t_interval_covers_the_true_mean_95_percent_of_the_time(n):
    rng = np.random.default_rng(1)
    trials = 20_000
    samples = rng.normal(loc=0.8, scale=0.05, size=(trials, n))
    covered = 0
    for row in samples:
        e = stats.estimate(row, 0.95)
        covered += e.lo <= 0.8 <= e.hi
    se = math.sqrt(0.95 * 0.05 / trials)  # 0.0015
    assert abs(covered / trials - 0.95) < 4 * se


def test_positive_quantity_interval_is_on_the_log_scale_and_never_negative():
    # the case: total wall-clock over 2 seeds, 33 s and 520 s, gave [-1095, 1648] with the plain t interval
    plain = stats.estimate([33.0, 520.0])
    assert plain.lo < 0
    e = stats.estimate([33.0, 520.0], positive=True)
    logs = np.log([33.0, 520.0])
    half = stats.t_quantile(0.975, 1) * logs.std(ddof=1) / math.sqrt(2)
    assert e.method == "log-t" and e.mean == pytest.approx(math.sqrt(33.0 * 520.0), rel=1e-12)
    assert (e.lo, e.hi) == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)), rel=1e-12)
    rng = np.random.default_rng(5)
    for _ in range(500):  # wildly spread positive values, few seeds: the lower end stays above 0
        v = rng.lognormal(0.0, 3.0, size=int(rng.integers(2, 6)))
        assert stats.estimate(v, positive=True).lo > 0
    with pytest.raises(ValueError, match="positive quantity"):
        stats.estimate([1.0, 0.0], positive=True)


def test_curve_interval_is_the_pointwise_estimate():
    ys = np.random.default_rng(3).normal(0.7, 0.03, size=(12, 5))  # 12 seeds x 5 points
    lo, hi = stats.curve_interval(ys, 0.95)
    for j in range(ys.shape[1]):
        e = stats.estimate(ys[:, j], 0.95)
        assert (lo[j], hi[j]) == pytest.approx((e.lo, e.hi), rel=1e-12)
    lo, hi = stats.curve_interval(ys[:1], 0.95)  # one seed: the curve itself
    assert lo.tolist() == hi.tolist() == ys[0].tolist()


def test_paired_difference_is_the_t_test_of_per_seed_differences():
    a = {0: 0.80, 1: 0.75, 2: 0.90, 3: 0.70}
    b = {0: 0.78, 1: 0.72, 2: 0.87, 3: 0.69, 9: 0.1}  # seed 9 has no partner: left out
    e = stats.paired(a, b)
    d = np.array([0.02, 0.03, 0.03, 0.01])
    t = d.mean() / (d.std(ddof=1) / 2)
    # two-sided p of t with 3 df, by integrating the density here (independent of scipy)
    p = 2 * (1 - _t_cdf_numeric(t, 3))
    assert e.n == 4 and e.mean == pytest.approx(d.mean()) and e.p == pytest.approx(p, rel=1e-6)
    # the unpaired intervals overlap, the paired test sees the consistent difference
    assert stats.estimate(a.values()).lo < stats.estimate(list(b.values())[:4]).hi and e.lo > 0
    r = stats.paired({0: 2.0, 1: 4.0}, {0: 1.0, 1: 1.0}, ratio=True)  # per-seed ratios 2 and 4
    assert r.method == "log-t" and r.mean == pytest.approx(math.sqrt(8.0)) and r.lo > 0
    assert stats.paired({0: 1.0}, {0: 2.0}).method == "none"


def test_holm_against_a_hand_worked_example():
    # p = 0.01, 0.04, 0.03, 0.20 (m = 4): sorted 0.01, 0.03, 0.04, 0.20 times 4, 3, 2, 1 = 0.04, 0.09, 0.08, 0.20;
    # made non-decreasing: 0.04, 0.09, 0.09, 0.20; back in the given order:
    assert stats.holm([0.01, 0.04, 0.03, 0.20]) == pytest.approx([0.04, 0.09, 0.09, 0.20])
    adjusted = stats.holm([0.5, math.nan, 0.02])  # an untested method does not count: m = 2
    assert adjusted[0] == pytest.approx(0.5) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.04)
    assert stats.holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # cut at 1
    assert [stats.verdict(p) for p in (0.04, 0.09, math.nan)] == [
        stats.SIGNIFICANT,
        stats.NOT_SIGNIFICANT,
        stats.UNTESTED,
    ]


def test_an_unbounded_ratio_is_not_an_estimate():
    assert stats.bounded(stats.Estimate(1.5, 1.1, 2.0, 3, "log-t", 0.1))
    assert not stats.bounded(stats.Estimate(5.78, 0.0, math.inf, 2, "log-t", 3.0))
    assert not stats.bounded(None)
