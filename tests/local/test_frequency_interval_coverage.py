"""Exact coverage of FrequencyOracle.confidence_interval, computed, not simulated.

A category's support count is C ~ Binomial(m, p) + Binomial(n - m, q) (m its true count), whatever
the oracle, and its interval depends on C alone; so the coverage at m is the sum of P(C = c) over
the c whose interval holds m, the law of C a convolution of two binomial pmfs. It must be at least
1 - alpha for every n, epsilon and m; only floating-point slack (1e-9) is allowed. No randomness,
so no false-positive rate to budget.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from dpkit.local import KRR, OLH, OUE, SUE, HadamardResponse, LocalReports
from dpkit.local._frequency import FrequencyOracle

SLACK = 1e-9
EPSILONS = [0.1, 0.5, 1.0, 2.0, 4.0, 5.0, 7.0, 10.0]
SIZES = [*range(1, 31), 40, 64, 100, 160, 200]


def oracles(epsilon: float) -> list[FrequencyOracle]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # epsilon above 5 warns; the interval must hold there too
        found: list[FrequencyOracle] = [KRR(2, epsilon), KRR(3, epsilon), KRR(16, epsilon)]
        found += [OUE(5, epsilon), SUE(5, epsilon), HadamardResponse(5, epsilon)]
        if epsilon <= 7:
            found.append(OLH(8, epsilon))
    return found


def coverage(oracle: FrequencyOracle, n: int, alpha: float, counts: range | list[int]) -> list[tuple[float, int]]:
    """(exact coverage, m) for each true count m."""
    intervals = oracle._count_intervals(np.arange(n + 1), n, alpha)
    out = []
    for m in counts:
        law = np.convolve(
            stats.binom.pmf(np.arange(m + 1), m, oracle.p), stats.binom.pmf(np.arange(n - m + 1), n - m, oracle.q)
        )
        covered = (intervals[:, 0] <= m) & (m <= intervals[:, 1])
        out.append((float(law[covered].sum()), m))
    return out


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("alpha", [0.05, 0.2])
def test_coverage_is_at_least_one_minus_alpha_for_every_small_n(epsilon: float, alpha: float) -> None:
    for oracle in oracles(epsilon):
        for n in SIZES:
            worst = min(coverage(oracle, n, alpha, range(n + 1)))
            assert worst[0] >= 1 - alpha - SLACK, (repr(oracle), n, alpha, worst)


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 5.0, 10.0])
def test_coverage_at_large_n(epsilon: float) -> None:
    for oracle in oracles(epsilon)[::2]:
        for n in (1000, 5000):
            counts = sorted({0, 1, 2, 5, 20, n // 10, n // 2, n - 1, n})
            worst = min(coverage(oracle, n, 0.05, counts))
            assert worst[0] >= 0.95 - SLACK, (repr(oracle), n, worst)


def test_qa_case_krr_two_categories_epsilon_five() -> None:
    """The reported case: 22 people all in category 0; the old normal interval covered count 0 of
    category 1 with probability 0.8627 only (every report of category 1 excluded 0)."""
    oracle = KRR(2, 5.0)
    ((exact, _m),) = coverage(oracle, 22, 0.05, [0])
    assert exact >= 0.95
    reports = LocalReports(oracle.name, oracle._parameters(), np.array([1] + [0] * 21))
    low, high = oracle.confidence_interval(reports, 0.05)[1]
    assert low == 0.0 and high >= 1.0


def test_intervals_are_integer_bounds_in_range_and_nested_in_alpha() -> None:
    oracle = OUE(6, 1.0)
    support = np.arange(0, 301, 7)
    wide, narrow = oracle._count_intervals(support, 300, 0.01), oracle._count_intervals(support, 300, 0.1)
    for intervals in (wide, narrow):
        assert np.all(intervals == np.round(intervals))
        assert np.all((0 <= intervals[:, 0]) & (intervals[:, 0] <= intervals[:, 1]) & (intervals[:, 1] <= 300))
    assert np.all(wide[:, 0] <= narrow[:, 0]) and np.all(narrow[:, 1] <= wide[:, 1])


def test_large_domain_intervals_cover_their_counts() -> None:
    """4096 categories from a million reports (support counts drawn independently per category, seed 0):
    each interval misses its count with probability <= 0.05, so more misses than the binomial's
    1e-6 upper quantile fail the test (false-positive rate <= 1e-6)."""
    oracle = OLH(4096, 2.0)
    n = 10**6
    rng = np.random.default_rng(0)
    true = np.bincount(rng.integers(0, 4096, n), minlength=4096)
    support = stats.binom.rvs(true, oracle.p, random_state=rng) + stats.binom.rvs(n - true, oracle.q, random_state=rng)
    intervals = oracle._count_intervals(support, n, 0.05)
    assert intervals.shape == (4096, 2)
    assert np.all((0 <= intervals[:, 0]) & (intervals[:, 0] <= intervals[:, 1]) & (intervals[:, 1] <= n))
    misses = int(np.sum((true < intervals[:, 0]) | (intervals[:, 1] < true)))
    assert misses <= stats.binom.isf(1e-6, 4096, 0.05)
