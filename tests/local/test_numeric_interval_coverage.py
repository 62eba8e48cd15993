"""Coverage of the numeric mean mechanisms' confidence intervals, for every n, epsilon and data set.

DuchiMechanism: computed exactly, not simulated. The interval depends on the reports only through
the number S of +B reports, and S is a sum of independent two-point trials of probabilities
p_i = (1 + x_i tanh(eps/2))/2 (a Poisson-binomial law), so the coverage at a data set is the sum of
P(S = s) over the s whose interval holds the mean: a finite sum. Equal values (a binomial S) are
checked at every n up to 60 and beyond, at a grid of means and just outside every interval end
(where coverage is smallest); unequal values at small n over Hoeffding's extremal mixes (values at
-1, at +1 and one common value in between). Each end must also err with probability <= alpha/2
on its own (what the method claims; a plain binomial Clopper-Pearson bound, which ignores that the
trials are unequal, fails this at epsilon = 10, n = 2). Only floating-point slack (1e-9) is allowed.

PiecewiseMechanism: the law of the mean of n reports has no closed form, so coverage is simulated
with fixed seeds; a cell fails if its misses exceed the upper 1 - 1e-6/cells quantile of
Binomial(runs, alpha), so a valid interval fails the whole test with probability <= 1e-6.

The normal-approximation intervals these replaced fail both: Duchi's coverage was 0.875 at
alpha = 0.05, n = 4 (0.50 at alpha = 0.2, n = 2); the piecewise mechanism's 0.89 at alpha = 0.05,
epsilon = 4, n = 3, and 0.91 at epsilon = 10, n = 30.
"""

from __future__ import annotations

import math
import warnings
from itertools import product

import numpy as np
import pytest
from scipy import stats

from dpkit.local import DuchiMechanism, LocalReports, PiecewiseMechanism
from dpkit.noise import InsecureSeededRandom

SLACK = 1e-9
EPSILONS = [0.1, 0.5, 1.0, 2.0, 4.0, 7.0, 10.0]
ALPHAS = [0.05, 0.2]
SIZES = [*range(1, 61), 64, 100, 128, 200, 500, 1000]


def quiet(cls: type, epsilon: float):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # epsilon above 5 warns; the interval must hold there too
        return cls(epsilon)


def duchi_intervals(mechanism: DuchiMechanism, n: int, alpha: float) -> np.ndarray:
    """The interval for each count s = 0..n of +B reports, through the public method, shape (n + 1, 2)."""
    b = mechanism.bound
    out = []
    for s in range(n + 1):
        data = np.concatenate([np.full(s, b), np.full(n - s, -b)])
        out.append(mechanism.confidence_interval(LocalReports(mechanism.name, (mechanism.epsilon,), data), alpha))
    return np.asarray(out)


def probe_means(intervals: np.ndarray) -> np.ndarray:
    """Means where coverage is smallest (just outside each interval end) and a grid, all in [-1, 1]."""
    ends = intervals.reshape(-1)
    points = np.concatenate([ends - 1e-9, ends + 1e-9, np.linspace(-1, 1, 201)])
    return np.unique(np.clip(points, -1, 1))


def poisson_binomial_pmf(probabilities: np.ndarray) -> np.ndarray:
    """Row-wise law of a sum of independent trials: probabilities (m, n) -> pmf (m, n + 1)."""
    rows, n = probabilities.shape
    pmf = np.zeros((rows, n + 1))
    pmf[:, 0] = 1.0
    for j in range(n):
        p = probabilities[:, j : j + 1]
        pmf[:, 1:] = pmf[:, 1:] * (1 - p) + pmf[:, :-1] * p
        pmf[:, :1] *= 1 - p
    return pmf


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_duchi_exact_coverage_with_equal_values(epsilon: float, alpha: float) -> None:
    mechanism = quiet(DuchiMechanism, epsilon)
    slope = math.tanh(epsilon / 2)
    for n in SIZES:
        intervals = duchi_intervals(mechanism, n, alpha)
        means = probe_means(intervals)
        law = stats.binom.pmf(np.arange(n + 1)[:, None], n, (1 + means[None, :] * slope) / 2)
        covered = (intervals[:, :1] <= means[None, :]) & (means[None, :] <= intervals[:, 1:])
        coverage = (law * covered).sum(axis=0)
        worst = int(np.argmin(coverage))
        assert coverage[worst] >= 1 - alpha - SLACK, (epsilon, alpha, n, means[worst], coverage[worst])
        above = (law * (intervals[:, :1] > means[None, :])).sum(axis=0)  # each end errs <= alpha/2
        below = (law * (intervals[:, 1:] < means[None, :])).sum(axis=0)
        assert max(above.max(), below.max()) <= alpha / 2 + SLACK, (epsilon, alpha, n, above.max(), below.max())


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 10.0])
@pytest.mark.parametrize("alpha", ALPHAS)
def test_duchi_exact_coverage_with_mixed_values(epsilon: float, alpha: float) -> None:
    # Among sums of independent trials with a given mean, tail and interval probabilities are
    # extreme when the p_i take at most three values, two of them the ends of their range
    # (Hoeffding 1956, Theorem 3): here values at -1, at +1, and one common value between.
    mechanism = quiet(DuchiMechanism, epsilon)
    slope = math.tanh(epsilon / 2)
    for n in range(2, 13):
        intervals = duchi_intervals(mechanism, n, alpha)
        probes = probe_means(intervals)
        for lows in range(n + 1):
            for highs in range(n + 1 - lows):
                rest = n - lows - highs
                if rest == 0:
                    means = np.array([(highs - lows) / n])
                    middle = np.zeros(1)
                else:  # the common value that gives each probed mean, where it lies in [-1, 1]
                    middle = (n * probes + lows - highs) / rest
                    means, middle = probes[np.abs(middle) <= 1], middle[np.abs(middle) <= 1]
                values = np.concatenate(
                    [
                        np.full((means.size, lows), -1.0),
                        np.full((means.size, highs), 1.0),
                        np.repeat(middle[:, None], rest, 1),
                    ],
                    axis=1,
                )
                law = poisson_binomial_pmf((1 + values * slope) / 2)
                # each end is a one-sided bound of error <= alpha/2 (so the interval misses <= alpha)
                above = (law * (intervals[None, :, 0] > means[:, None])).sum(axis=1)
                below = (law * (intervals[None, :, 1] < means[:, None])).sum(axis=1)
                worst = int(np.argmax(np.maximum(above, below))) if means.size else 0
                assert means.size == 0 or max(above[worst], below[worst]) <= alpha / 2 + SLACK, (
                    epsilon,
                    alpha,
                    n,
                    lows,
                    highs,
                    means[worst],
                    above[worst],
                    below[worst],
                )


def test_duchi_interval_is_not_much_wider_than_the_normal_approximation_at_large_n() -> None:
    mechanism = DuchiMechanism(1.0)
    n = 10_000
    for alpha in ALPHAS:
        low, high = duchi_intervals(mechanism, n, alpha)[n // 2]
        normal = 2 * stats.norm.isf(alpha / 2) * mechanism.bound / math.sqrt(n)
        assert high - low <= 1.02 * normal, (alpha, high - low, normal)


PM_EPSILONS = [0.1, 1.0, 4.0, 10.0]
PM_SIZES = [1, 2, 3, 5, 10, 30, 100]
PM_RUNS = 2000


def pm_data_sets(n: int) -> dict[str, np.ndarray]:
    return {
        "all at 1": np.ones(n),
        "all at 0": np.zeros(n),
        "alternating -1, 1": np.where(np.arange(n) % 2 == 0, 1.0, -1.0),
    }


@pytest.mark.statistical
def test_piecewise_simulated_coverage() -> None:
    cells = len(PM_EPSILONS) * len(PM_SIZES) * 3 * len(ALPHAS)
    failures = []
    for epsilon, n in product(PM_EPSILONS, PM_SIZES):
        mechanism = quiet(PiecewiseMechanism, epsilon)
        for index, (name, values) in enumerate(pm_data_sets(n).items()):
            source = InsecureSeededRandom(1000 * n + 10 * index + int(epsilon * 10))
            runs = mechanism.randomize(np.tile(values, PM_RUNS), rng=source).data.reshape(PM_RUNS, n)
            mean = values.mean()
            for alpha in ALPHAS:
                limit = stats.binom.isf(1e-6 / cells, PM_RUNS, alpha)  # P(misses > limit) <= 1e-6/cells
                misses = 0
                for row in runs:
                    low, high = mechanism.confidence_interval(LocalReports(mechanism.name, (epsilon,), row), alpha)
                    misses += not low <= mean <= high
                if misses > limit:
                    failures.append((epsilon, n, name, alpha, misses / PM_RUNS))
    assert not failures, failures


@pytest.mark.parametrize("cls", [DuchiMechanism, PiecewiseMechanism])
@pytest.mark.parametrize("epsilon", [0.1, 2.0, 10.0])
def test_bounds_lie_in_the_domain(cls: type, epsilon: float) -> None:
    mechanism = quiet(cls, epsilon)
    source = InsecureSeededRandom(7)
    for n, values in [(1, np.ones(1)), (5, -np.ones(5)), (50, np.ones(50)), (2000, np.linspace(-1, 1, 2000))]:
        reports = mechanism.randomize(values, rng=source)
        for alpha in (1e-6, 0.05, 0.2, 0.9):
            low, high = mechanism.confidence_interval(reports, alpha)
            assert -1.0 <= low <= high <= 1.0, (n, alpha, low, high)
