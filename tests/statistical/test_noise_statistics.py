"""Goodness of fit of the dpkit.noise samplers against their exact laws, and the power of the tests.

Each sampler is seeded (InsecureSeededRandom) so the tier is reproducible; every test rejects
at alpha = 1e-6, so a correct sampler fails with probability about 1e-6 per test. Each fit test
is paired with a power check: the same test must reject samples drawn at 0.7x and 1.3x the
nominal scale, so a pass means something.
"""

import math
from fractions import Fraction
from itertools import permutations

import numpy as np
import pytest
from scipy.stats import binomtest, chisquare, laplace, norm

from dpkit.noise import (
    InsecureSeededRandom,
    bernoulli_exp,
    bernoulli_rational,
    discrete_gaussian,
    discrete_laplace,
    geometric,
    permutation,
    uniform_integers,
)

pytestmark = pytest.mark.statistical

ALPHA = 1e-6
SAMPLES = 400_000
SCALES = [0.5, 1.0, 3.0, 100.0, 1e4, 1e6]
TARGET_BINS = 120


# ---------------------------------------------------------------------------------------------
# Exact CDFs on the integers, evaluated at bin edges
# ---------------------------------------------------------------------------------------------


def discrete_laplace_cdf(edges, scale):
    """P(X <= e) for P(X = x) = (1 - q)/(1 + q) q^|x|, q = e^{-1/scale}; closed form, no cancellation."""
    edges = np.asarray(edges, dtype=np.float64)
    q = math.exp(-1.0 / scale)
    negative = np.exp(edges / scale) / (1 + q)  # e <= -1: q^{-e} / (1 + q)
    # e >= 0: 1 - q^{e+1}/(1+q)
    positive = 1.0 - np.exp(-(edges + 1) / scale) / (1 + q)
    return np.where(edges < 0, negative, positive)


def geometric_cdf(edges, scale):
    """P(G <= e) = 1 - q^{e+1} on {0, 1, ...}."""
    edges = np.asarray(edges, dtype=np.float64)
    return np.where(edges < 0, 0.0, -np.expm1(-(edges + 1) / scale))


def discrete_gaussian_cdf(edges, sigma):
    """P(X <= e) for P(X = x) proportional to exp(-x^2 / (2 sigma^2)), by direct summation.

    The weights peak at exp(0) = 1, so the normaliser is >= 1 and nothing underflows that
    matters: beyond 12 sigma the mass is below e^-72 and is dropped. Large sigma is summed in
    chunks, one range per bin (vectorized).
    """
    reach = int(math.ceil(12 * sigma)) + 10
    edges = np.clip(np.asarray(edges, dtype=np.int64), -reach - 1, reach)
    bounds = np.concatenate([[-reach - 1], edges, [reach]])
    masses = np.empty(bounds.size - 1)
    for k in range(bounds.size - 1):
        start, stop = bounds[k] + 1, bounds[k + 1]  # the bin (bounds[k], bounds[k+1]]
        total = 0.0
        for chunk_start in range(int(start), int(stop) + 1, 1 << 22):
            x = np.arange(chunk_start, min(int(stop), chunk_start + (1 << 22) - 1) + 1, dtype=np.float64)
            total += float(np.exp(-(x * x) / (2.0 * sigma * sigma)).sum())
        masses[k] = total
    cumulative = np.cumsum(masses) / masses.sum()
    return cumulative[:-1]


# ---------------------------------------------------------------------------------------------
# Binned chi-square test
# ---------------------------------------------------------------------------------------------


def make_bins(cdf, quantile, n, bins=TARGET_BINS):
    """Integer bin edges (bin k is (e_{k-1}, e_k]) with expected count >= 5 in every bin, and their probabilities."""
    levels = np.linspace(0.0, 1.0, bins + 1)[1:-1]
    edges = np.unique(np.floor(quantile(levels)).astype(np.int64))
    probabilities = np.diff(np.concatenate([[0.0], cdf(edges), [1.0]]))
    # merge bins expecting fewer than 5 into their right neighbour (the last into its left)
    kept_edges, kept_probabilities, carry = [], [], 0.0
    for index, probability in enumerate(probabilities):
        carry += probability
        if carry * n >= 5 and index < edges.size:
            kept_edges.append(edges[index])
            kept_probabilities.append(carry)
            carry = 0.0
    kept_probabilities.append(carry)
    if carry * n < 5 and len(kept_probabilities) > 1:
        kept_probabilities[-2] += kept_probabilities.pop()
        kept_edges.pop()
    return np.array(kept_edges, dtype=np.int64), np.array(kept_probabilities)


def chi_square_p_value(samples, edges, probabilities):
    counts = np.bincount(np.searchsorted(edges, samples, side="left"), minlength=edges.size + 1)
    expected = probabilities / probabilities.sum() * samples.size
    assert expected.min() >= 5
    return chisquare(counts, expected).pvalue


def laplace_bins(scale, n):
    return make_bins(lambda e: discrete_laplace_cdf(e, scale), lambda p: laplace.ppf(p, scale=scale), n)


def gaussian_bins(sigma, n):
    return make_bins(lambda e: discrete_gaussian_cdf(e, sigma), lambda p: norm.ppf(p, scale=sigma), n)


# ---------------------------------------------------------------------------------------------
# The reference CDFs themselves
# ---------------------------------------------------------------------------------------------


def test_reference_cdfs_match_direct_sums():
    for scale in [0.5, 3.0]:
        x = np.arange(-200, 201)
        q = math.exp(-1 / scale)
        pmf = (1 - q) / (1 + q) * q ** np.abs(x)
        assert np.allclose(discrete_laplace_cdf(x, scale), np.cumsum(pmf), atol=1e-12)
    for sigma in [0.5, 3.0]:
        x = np.arange(-60, 61)
        weights = np.exp(-(x**2) / (2 * sigma**2))
        assert np.allclose(discrete_gaussian_cdf(x, sigma), np.cumsum(weights / weights.sum()), atol=1e-12)
    # for large sigma the discrete Gaussian's CDF at half-integers is the normal CDF (Poisson summation)
    edges = np.array([-2_000_000, -1, 0, 999_999])
    assert np.allclose(discrete_gaussian_cdf(edges, 1e6), norm.cdf(edges + 0.5, scale=1e6), atol=1e-9)


# ---------------------------------------------------------------------------------------------
# Discrete Laplace and discrete Gaussian: fit and power
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
def test_discrete_laplace_fits_and_test_has_power(scale):
    edges, probabilities = laplace_bins(scale, SAMPLES)
    rng = InsecureSeededRandom(100 + SCALES.index(scale))
    assert chi_square_p_value(discrete_laplace(scale, SAMPLES, rng=rng), edges, probabilities) > ALPHA
    for wrong in (0.7 * scale, 1.3 * scale):
        assert chi_square_p_value(discrete_laplace(wrong, SAMPLES, rng=rng), edges, probabilities) < ALPHA


@pytest.mark.parametrize("sigma", SCALES)
def test_discrete_gaussian_fits_and_test_has_power(sigma):
    edges, probabilities = gaussian_bins(sigma, SAMPLES)
    rng = InsecureSeededRandom(200 + SCALES.index(sigma))
    assert chi_square_p_value(discrete_gaussian(sigma, SAMPLES, rng=rng), edges, probabilities) > ALPHA
    for wrong in (0.7 * sigma, 1.3 * sigma):
        assert chi_square_p_value(discrete_gaussian(wrong, SAMPLES, rng=rng), edges, probabilities) < ALPHA


@pytest.mark.parametrize("scale", [0.5, 1.0, 100.0, 1e6])
def test_constant_time_mode_fits_the_same_laws(scale):
    rng = InsecureSeededRandom(300 + int(math.log10(scale) + 1))
    edges, probabilities = laplace_bins(scale, SAMPLES)
    samples = discrete_laplace(scale, SAMPLES, rng=rng, constant_time=True)
    assert chi_square_p_value(samples, edges, probabilities) > ALPHA
    edges, probabilities = gaussian_bins(scale, SAMPLES)
    samples = discrete_gaussian(scale, SAMPLES, rng=rng, constant_time=True)
    assert chi_square_p_value(samples, edges, probabilities) > ALPHA


def test_discrete_laplace_is_symmetric_and_centred():
    samples = discrete_laplace(3.0, SAMPLES, rng=InsecureSeededRandom(7))
    positive, negative = np.count_nonzero(samples > 0), np.count_nonzero(samples < 0)
    assert binomtest(positive, positive + negative, 0.5).pvalue > ALPHA


# ---------------------------------------------------------------------------------------------
# Geometric
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0, 100.0, 1e4, 1e6])
def test_geometric_fits_and_test_has_power(scale):
    def quantile(p):
        return np.maximum(-scale * np.log1p(-p) - 1, 0)

    edges, probabilities = make_bins(lambda e: geometric_cdf(e, scale), quantile, SAMPLES)
    rng = InsecureSeededRandom(400 + int(math.log10(scale) + 1))
    samples = geometric(scale, SAMPLES, rng=rng)
    assert samples.min() >= 0
    assert chi_square_p_value(samples, edges, probabilities) > ALPHA
    for wrong in (0.7 * scale, 1.3 * scale):
        assert chi_square_p_value(geometric(wrong, SAMPLES, rng=rng), edges, probabilities) < ALPHA


# ---------------------------------------------------------------------------------------------
# Bernoulli trials: exact binomial tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("x", [0.0, 0.01, 0.5, 1.0, 3.0, 10.0])
def test_bernoulli_exp_matches_exp_minus_x(x):
    n = 1_000_000
    trials = bernoulli_exp(x, n, rng=InsecureSeededRandom(500))
    successes = int(np.count_nonzero(trials))
    if x == 0.0:
        assert successes == n
        return
    assert binomtest(successes, n, math.exp(-x)).pvalue > ALPHA
    # power: the same test rejects a probability 5% too small
    if x <= 3.0:
        assert binomtest(successes, n, math.exp(-x) * 0.95).pvalue < ALPHA


def test_bernoulli_exp_array_form():
    x = np.repeat(np.array([0.2, 2.0]), 500_000)
    trials = bernoulli_exp(x, rng=InsecureSeededRandom(501))
    for value, part in ((0.2, trials[:500_000]), (2.0, trials[500_000:])):
        assert binomtest(int(part.sum()), part.size, math.exp(-value)).pvalue > ALPHA


@pytest.mark.parametrize("p", ["1/3", "1/2", Fraction(7, 1000), "1/1000000", "999/1000", 0, 1])
def test_bernoulli_rational_matches_p(p):
    n = 1_000_000
    probability = Fraction(p)
    successes = int(np.count_nonzero(bernoulli_rational(p, n, rng=InsecureSeededRandom(600))))
    if probability in (0, 1):
        assert successes == n * probability
        return
    assert binomtest(successes, n, float(probability)).pvalue > ALPHA


def test_bernoulli_rational_power():
    successes = int(np.count_nonzero(bernoulli_rational("1/3", 1_000_000, rng=InsecureSeededRandom(601))))
    assert binomtest(successes, 1_000_000, 0.33).pvalue < ALPHA


# ---------------------------------------------------------------------------------------------
# Uniform integers and permutations
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("upper", [1, 2, 3, 6, 7, 1000, 2**33 + 1, 3 * 2**60])
def test_uniform_integers_are_uniform(upper):
    n = 600_000
    values = uniform_integers(upper, n, rng=InsecureSeededRandom(700))
    assert values.min() >= 0 and values.max() < upper
    if upper == 1:
        assert np.all(values == 0)
        return
    bins = min(upper, 1000)
    # bin b holds the values v with floor(v * bins / upper) == b; its probability is its size / upper
    if upper <= 1000:
        counts = np.bincount(values, minlength=upper)
        expected = np.full(upper, n / upper)
    else:
        index = (values.astype(object) * bins // upper).astype(np.int64)
        counts = np.bincount(index, minlength=bins)
        starts = np.array([-(-b * upper // bins) for b in range(bins + 1)], dtype=object)
        sizes = np.diff(starts).astype(np.float64)
        expected = sizes / upper * n
    assert chisquare(counts, expected).pvalue > ALPHA


def test_uniform_integers_power():
    # the same test rejects a law tilted by +-5% across the range
    values = uniform_integers(1000, 600_000, rng=InsecureSeededRandom(701))
    tilt = 1 + 0.05 * np.linspace(-1, 1, 1000)
    assert chisquare(np.bincount(values, minlength=1000), tilt / tilt.sum() * values.size).pvalue < ALPHA


def test_permutation_positions_are_uniform():
    n, draws = 6, 30_000
    rng = InsecureSeededRandom(800)
    table = np.zeros((n, n), dtype=np.int64)  # table[position, element]
    for _ in range(draws):
        perm = permutation(n, rng=rng)
        assert sorted(perm.tolist()) == list(range(n))
        table[np.arange(n), perm] += 1
    for position in range(n):
        assert chisquare(table[position]).pvalue > ALPHA


def test_permutation_law_is_uniform_over_all_orders():
    n, draws = 4, 48_000
    rng = InsecureSeededRandom(801)
    index = {order: i for i, order in enumerate(permutations(range(n)))}
    counts = np.zeros(len(index), dtype=np.int64)
    for _ in range(draws):
        counts[index[tuple(permutation(n, rng=rng).tolist())]] += 1
    assert chisquare(counts).pvalue > ALPHA
