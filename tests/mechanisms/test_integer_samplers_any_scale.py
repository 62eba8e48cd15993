"""Integer noise of any scale: the discrete Laplace / geometric mechanisms, the discrete Gaussian
sampler and mechanism, and the Gaussian mechanism's grid.

Before, all of them stopped at the samplers' 2**40: Geometric(1, 1e-13) was refused ("gives noise
scale 1e+13 above the sampler's limit"), DiscreteGaussian(1, rho=1e-26) too ("sigma 7.07e12 above
the sampler's limit"), and the Gaussian mechanism coarsened its output grid until sigma fitted 2**40
grid units, which inflated its effective sensitivity (1.031 Delta at epsilon 1e-10, delta 1e-12;
1.31 Delta at dimension 100). Now the noise is exact at any scale the float range allows (scales and
sigmas below 2**1007), releases are int64 while they fit and Python integers beyond, the accuracy
helpers agree with mpmath, and the Gaussian keeps the grid 2^-20 of its L2 share at every epsilon.

Statistical tests use fixed seeds and thresholds from an explicit false-positive rate
(FALSE_POSITIVE_RATE) through scipy.stats.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpkit._errors import InvalidParameterError, PrivacyWarning
from dpkit.mechanisms import DiscreteGaussian, Gaussian
from dpkit.mechanisms.gaussian import analytic_gaussian_sigma, discrete_gaussian_delta_upper
from dpkit.mechanisms.geometric import DiscreteLaplace, Geometric
from dpkit.noise import InsecureSeededRandom, discrete_gaussian, sensitivity_grid_exponent

FALSE_POSITIVE_RATE = 1e-6
# Two-sided normal quantile of the false-positive rate, for z-tests.
Z_THRESHOLD = float(stats.norm.isf(FALSE_POSITIVE_RATE / 2))
# The Gaussian's documented grid rounding: Delta + sqrt(d) 2^k <= (1 + 2^-20) Delta, up to the float
# rounding of sqrt(d) and of the share (a relative 2^-40 covers both with room).
# The Gaussian's grid coarsens with the noise by at most 10 bits: Delta_eff <= (1 + 2^-10) Delta.
GRID_SLACK = (Fraction(1) + Fraction(1, 2**10)) * (1 + Fraction(1, 2**40))

HUGE_EPSILONS = [1e-13, 1e-50, 1e-300]  # noise scales 1e13, 1e50, 1e300 (all above 2**40)


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        yield


def ks_pvalue(sample: np.ndarray, cdf: Any) -> float:
    return float(stats.kstest(sample, cdf).pvalue)


def as_floats(values: Any) -> np.ndarray:
    return np.array([float(v) for v in np.ravel(values)])


# ---------------------------------------------------------------------------------------------
# The discrete Gaussian sampler beyond 2**40
# ---------------------------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [5.5, 37.3])
def test_discrete_gaussian_any_sigma_path_has_the_exact_law(sigma, monkeypatch):
    """The any-sigma path (proposals from the two-part discrete Laplace sampler, exact acceptance with
    a rational gamma) against the exact pmf, at small sigmas where the law is far from continuous: the
    path's threshold is lowered from 2^40 to 4 and the two-part split from 2^36 to 2^2, so sigma 37.3
    draws its proposal at t = 38 as H (scale 2.375) and four low bits, as it does at sigma 1e13 with
    eight. Chi-square over bins of expected count >= 20 (tails pooled)."""
    from dpkit.noise import _samplers

    monkeypatch.setattr(_samplers, "MAX_SCALE", 4.0)
    monkeypatch.setattr(_samplers, "_FAST_SCALE_BITS", 2)
    n = 200_000
    draws = np.asarray(discrete_gaussian(sigma, n, rng=InsecureSeededRandom(31)), dtype=np.int64)
    support = np.arange(-int(40 * sigma) - 1, int(40 * sigma) + 2)
    with mpmath.workdps(30):
        weights = [mpmath.exp(-(mpmath.mpf(int(x)) ** 2) / (2 * mpmath.mpf(sigma) ** 2)) for x in support]
        total = mpmath.fsum(weights)
        pmf = np.array([float(w / total) for w in weights])
    # Bins: each value with expected count >= 20, the rest of each tail pooled.
    big = pmf * n >= 20
    edge = int(np.abs(support[big]).max())
    inside = np.abs(support) <= edge
    counts = [int(np.sum(draws == v)) for v in support[inside]] + [
        int(np.sum(draws < -edge)),
        int(np.sum(draws > edge)),
    ]
    probabilities = np.concatenate([pmf[inside], [pmf[support < -edge].sum(), pmf[support > edge].sum()]])
    counts_array = np.array(counts)
    assert counts_array.sum() == n
    pvalue = float(stats.chisquare(counts_array, probabilities / probabilities.sum() * n).pvalue)
    assert pvalue > FALSE_POSITIVE_RATE


@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [2.0**40 * 1.5, 7.07e12, 1e20, 1e200, 1e303])
def test_discrete_gaussian_beyond_2_40_is_the_normal_law(sigma):
    """At sigma >> 1 the discrete Gaussian is N(0, sigma^2) to within 1/sigma in distribution: KS of
    X / sigma, plus the variance (chi-square band). Before: 'sigma: ... must be at most 1.09951e+12'."""
    n = 20_000
    draws = discrete_gaussian(sigma, n, rng=InsecureSeededRandom(32))
    scaled = np.array([float(Fraction(int(x)) / Fraction(sigma)) for x in draws])
    assert ks_pvalue(scaled, "norm") > FALSE_POSITIVE_RATE
    statistic = float(np.sum(scaled**2))
    assert stats.chi2.ppf(FALSE_POSITIVE_RATE / 2, n) <= statistic <= stats.chi2.isf(FALSE_POSITIVE_RATE / 2, n)


def test_discrete_gaussian_dtype_is_int64_while_the_draws_fit():
    """int64 up to ~2^57 (every draw fits), Python integers (object) beyond."""
    fits = discrete_gaussian(1e13, 1000, rng=InsecureSeededRandom(33))
    assert fits.dtype == np.int64
    wide = discrete_gaussian(1e30, 1000, rng=InsecureSeededRandom(34))
    assert wide.dtype == object and all(isinstance(x, int) for x in wide)
    assert discrete_gaussian(1e13, 0, rng=InsecureSeededRandom(35)).shape == (0,)


def test_discrete_gaussian_constant_time_stays_within_2_40():
    """The constant-time mode has no two-part sampler: refused beyond 2^40 by name, saying why."""
    with pytest.raises(InvalidParameterError, match="constant_time") as caught:
        discrete_gaussian(2.0**41, 10, rng=InsecureSeededRandom(36), constant_time=True)
    assert caught.value.name == "sigma"
    assert discrete_gaussian(2.0**40, 10, rng=InsecureSeededRandom(36), constant_time=True).dtype == np.int64


def test_proposals_beyond_the_float_range_are_converted_exactly():
    """|y| / sigma for integers past 2^1024 (never drawn in practice) is still the correctly rounded
    quotient, not an OverflowError."""
    from dpkit.noise._samplers import _over_float

    values = np.array([3, 2**1100, 2**1030 + 1], dtype=object)
    quotients = _over_float(values, 2.0**80)
    assert quotients.tolist() == [3 * 2.0**-80, 2.0**1020, 2.0**950]


# Seeded draws pinned by digest, so that a change of sampler shows. Below sigma 2^31 they are the
# draws dpkit always made; from 2^31 on (two-part proposals, since 2026-11-25) they were recorded on
# that change (before it: 2^36 x 1.1 gave 082de43df060bfbb and 2^40 gave 0c928e1abcb03f75).
GOLDEN_DRAWS = {
    0.3: "71b8bb735c96d065",
    17.0: "5d4693b3916c38f1",
    12345.678: "75785b0567bef4f2",
    2.0**36 * 1.1: "75662e1836b2160b",
    2.0**40: "ffddaea3949055ee",
}


def _digest(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.int64).tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("sigma", list(GOLDEN_DRAWS))
def test_seeded_draws_are_pinned(sigma):
    assert _digest(discrete_gaussian(sigma, 2000, rng=InsecureSeededRandom(37))) == GOLDEN_DRAWS[sigma]


# ---------------------------------------------------------------------------------------------
# Discrete Laplace and geometric mechanisms at any scale
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", HUGE_EPSILONS)
@pytest.mark.parametrize("kind", ["discrete-laplace", "geometric", "geometric-bounded", "geometric-lower"])
def test_integer_mechanisms_release_at_any_scale(kind, epsilon):
    """Built, released (scalar: int; vector: int64 while it fits, Python integers beyond), with an
    interval around the release. Before: 'epsilon: got 1e-13; gives noise scale 1e+13 above the
    sampler's limit'."""
    mechanism = {
        "discrete-laplace": lambda: DiscreteLaplace(1, epsilon),
        "geometric": lambda: Geometric(1, epsilon),
        "geometric-bounded": lambda: Geometric(1, epsilon, lower=0, upper=10),
        "geometric-lower": lambda: Geometric(1, epsilon, lower=-5),
    }[kind]()
    assert Fraction(mechanism.scale) >= 1 / Fraction(repr(epsilon))
    rng = InsecureSeededRandom(40)
    scalar = mechanism.release(5, rng=rng)
    assert isinstance(scalar, int)
    vector = mechanism.release(np.arange(6), rng=rng)
    assert vector.shape == (6,)
    if epsilon == 1e-13 or kind == "geometric-bounded":
        assert vector.dtype == np.int64
    else:
        assert vector.dtype == object and all(isinstance(v, int) for v in vector)
    if kind == "geometric-bounded":
        assert all(0 <= v <= 10 for v in vector) and 0 <= scalar <= 10
    if kind == "geometric-lower":
        assert all(v >= -5 for v in vector)
    low, high = mechanism.confidence_interval(0.05, released=vector)
    assert np.all(np.asarray(low) <= np.asarray(high))
    low, high = mechanism.confidence_interval(0.05, released=scalar)
    assert low <= high
    repeated = mechanism.release_repeated(3, 5, rng=rng)
    assert repeated.shape == (5,)


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [1e-13, 1e-200])
def test_discrete_laplace_noise_is_the_nominal_laplace_law(epsilon):
    """At scale t >> 1, Z / t is Laplace(0, 1) to within 1/t in distribution (KS) with E|Z| / t = 1."""
    mechanism = DiscreteLaplace(1, epsilon)
    n = 20_000
    noise = mechanism.release_repeated(0, n, rng=InsecureSeededRandom(41))
    scaled = np.array([float(Fraction(int(z)) / Fraction(mechanism.scale)) for z in noise])
    assert ks_pvalue(scaled, "laplace") > FALSE_POSITIVE_RATE
    assert abs(np.mean(np.abs(scaled)) - 1.0) <= Z_THRESHOLD / math.sqrt(n)  # |Z| / t ~ Exp(1): sd 1


@pytest.mark.statistical
def test_truncated_geometric_at_a_huge_scale_has_its_output_law():
    """Geometric(1, 1e-100, 0..10): the clamped law (almost all mass on the two ends) against
    output_distribution, chi-square on the ends and the pooled middle."""
    mechanism = Geometric(1, 1e-100, lower=0, upper=10)
    n = 4000
    outputs = np.asarray(mechanism.release(np.full(n, 3), rng=InsecureSeededRandom(42)), dtype=np.int64)
    law = mechanism.output_distribution(3)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    probabilities = np.array([law[0], law[10], 1 - law[0] - law[10]])
    counts = np.array([np.sum(outputs == 0), np.sum(outputs == 10), np.sum((outputs > 0) & (outputs < 10))])
    assert counts[2] == 0  # probability 9e-100
    assert float(stats.binomtest(int(counts[0]), n, law[0] / (law[0] + law[10])).pvalue) > FALSE_POSITIVE_RATE
    assert probabilities[2] < 1e-98


@pytest.mark.parametrize("sensitivity", [1, 3])
@pytest.mark.parametrize("epsilon", HUGE_EPSILONS)
@pytest.mark.parametrize("alpha", [0.5, 0.05, 1e-10, 1e-300])
def test_discrete_laplace_accuracy_helpers_match_mpmath(sensitivity, epsilon, alpha):
    """noise_quantile is valid and the smallest up to its stated relative margin (1e-12 of alpha, i.e.
    about 1e-12 scale units, plus the float tail's resolution); the tail, E|Z| and Var Z are the exact
    law's to 1e-12 (Var overflows to inf beyond ~1e154, as the exact value does)."""
    mechanism = DiscreteLaplace(sensitivity, epsilon)
    t = mechanism.scale
    with mpmath.workdps(40 + int(math.log10(t))):  # h to the unit: as many digits as the scale has
        scale = mpmath.mpf(t)
        q = mpmath.exp(-1 / scale)

        def tail(m: int) -> Any:  # P(|Z| >= m) = 2 q^m / (1 + q), q^m as exp(-m / t) (mpmath's q**m with
            # a 160-bit integer m exhausted memory)
            return mpmath.mpf(1) if m <= 0 else 2 * mpmath.exp(-mpmath.mpf(m) / scale) / (1 + q)

        # Smallest h with P(|Z| > h) = tail(h + 1) <= alpha.
        exact_h = max(0, int(mpmath.ceil(scale * mpmath.log(2 / (alpha * (1 + q))))) - 1)
        while tail(exact_h + 1) > alpha:
            exact_h += 1
        while exact_h > 0 and tail(exact_h) <= alpha:
            exact_h -= 1
        h = mechanism.noise_quantile(alpha)
        assert h == math.floor(h) and int(h) >= exact_h
        # The margin: alpha (1 - 1e-12) moves h by 1e-12 t; the float tail's steps (m / t to 2^-52
        # relative) by about 2^-52 ln(2 / alpha) t; a float h above 2^53 rounds up by an ulp.
        assert int(h) - exact_h <= (1e-12 + 2.0**-50 * math.log(2 / alpha)) * t + math.ulp(h) + 2
        for m in (1, exact_h, 3 * exact_h + 1):
            assert mechanism.tail_probability(m) == pytest.approx(float(tail(m)), rel=1e-12)
        assert mechanism.expected_error == pytest.approx(float(2 * q / (1 - q**2)), rel=1e-12)
        variance = 2 * q / (1 - q) ** 2
        if variance > mpmath.mpf(1.7976931348623157e308):
            assert mechanism.variance == math.inf
        else:
            assert mechanism.variance == pytest.approx(float(variance), rel=1e-12)
        assert float(mechanism.pmf(0)) == pytest.approx(float((1 - q) / (1 + q)), rel=1e-12)


@pytest.mark.parametrize("epsilon", [1e-30, 1e-300])
def test_interval_around_a_wide_release_is_exact_and_outward(epsilon):
    """Released Python integers beyond int64 are taken exactly: each interval end is the exact
    release -+ h rounded outward to a float (before, the base class refused them as non-numbers)."""
    mechanism = DiscreteLaplace(1, epsilon)
    released = mechanism.release([5, -7, 11], rng=InsecureSeededRandom(43))
    assert released.dtype == object
    for simultaneous, level in ((False, 0.05), (True, 0.05 / 3)):
        low, high = mechanism.confidence_interval(0.05, released=released, simultaneous=simultaneous)
        h = mechanism._quantile_units(level)  # the exact integer (noise_quantile rounds it up to a float)
        assert mechanism.noise_quantile(level) >= h
        for value, lo, hi in zip(released, low, high, strict=True):
            assert Fraction(lo) <= value - h and Fraction(hi) >= value + h
            assert math.nextafter(lo, math.inf) > value - h and math.nextafter(hi, -math.inf) < value + h
    with pytest.raises(InvalidParameterError) as caught:
        mechanism.confidence_interval(0.05, released=released, dimension=2)
    assert caught.value.name == "dimension"


def test_interval_around_an_int64_release_beyond_2_53_covers_exactly():
    """int64 releases of 2^53 and more (not exact as floats) are taken exactly too: the old float
    interval around 2^60 + 1 was [2^60, 2^60] +- 3 rounded to the nearest, missing 2^60 - 2."""
    mechanism = DiscreteLaplace(1, 1.0)
    value = 2**60 + 1
    low, high = mechanism.confidence_interval(0.05, released=np.array([value]))
    h = int(mechanism.noise_quantile(0.05))
    assert Fraction(float(low[0])) <= value - h and Fraction(float(high[0])) >= value + h
    low, high = mechanism.confidence_interval(0.05, released=np.int64(value))
    assert Fraction(low) <= value - h and Fraction(high) >= value + h


@pytest.mark.parametrize("accuracy", [1e15, 1e100])
def test_discrete_laplace_from_accuracy_beyond_2_40(accuracy):
    """The least epsilon meeting a wide target: valid, and the next float below misses it. Before: refused
    ('met even at the smallest epsilon the sampler supports', noise scale 2^40)."""
    mechanism = DiscreteLaplace.from_accuracy(1, accuracy=accuracy, alpha=0.05)
    assert mechanism.noise_quantile(0.05) <= accuracy
    below = DiscreteLaplace(1, math.nextafter(mechanism.epsilon, 0.0))
    assert below.noise_quantile(0.05) > accuracy
    assert mechanism.epsilon == pytest.approx(math.log(1 / 0.05) / accuracy, rel=1e-9)


@pytest.mark.parametrize(
    ("build", "name", "message"),
    [
        (lambda: DiscreteLaplace(1, 1e-310), "epsilon", "2\\*\\*1007"),
        (lambda: Geometric(1, 5e-324), "epsilon", "2\\*\\*1007"),
        (lambda: DiscreteLaplace(1, 1e-13, constant_time=True), "epsilon", "constant-time"),
        (lambda: DiscreteGaussian(1, sigma=1e304), "sigma", "2\\*\\*1007"),
        (lambda: DiscreteGaussian(1e200, rho=1e-300), "rho", "2\\*\\*1007"),
        (lambda: DiscreteLaplace.from_accuracy(1, accuracy=1e305, alpha=0.05), "accuracy", "below 2\\*\\*1007"),
    ],
)
def test_only_what_leaves_float64_is_refused_by_name(build, name, message):
    with pytest.raises(InvalidParameterError, match=message) as caught:
        build()
    assert caught.value.name == name


# ---------------------------------------------------------------------------------------------
# The discrete Gaussian mechanism at any sigma
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: DiscreteGaussian(1, rho=1e-26),  # sigma 7.07e12: refused before
        lambda: DiscreteGaussian(1, sigma=1e40),
        lambda: DiscreteGaussian(1, rho=5e-324),  # sigma 3.2e161: sigma^2 overflows
        lambda: DiscreteGaussian(3, sigma=1e303),
    ],
)
def test_discrete_gaussian_mechanism_releases_at_any_sigma(build):
    mechanism = build()
    assert mechanism.guarantee.rho_exact == Fraction(mechanism.sensitivity) ** 2 / (
        2 * Fraction(mechanism.sigma) ** 2
    ) or (mechanism.guarantee.rho_exact == Fraction(repr(mechanism.rho)))
    rng = InsecureSeededRandom(50)
    scalar = mechanism.release(7, rng=rng)
    assert isinstance(scalar, int)
    vector = mechanism.release([1, 2, 3], rng=rng)
    assert vector.dtype == (np.int64 if mechanism.sigma < 1e17 else object)
    repeated = mechanism.release_repeated(4, 10, rng=rng)
    assert repeated.shape == (10,)
    low, high = mechanism.confidence_interval(0.05, released=vector)
    assert np.all(np.asarray(low) < np.asarray(high))
    for helper in (mechanism.noise_quantile(1e-300), mechanism.expected_error, float(mechanism.pmf(0))):
        assert math.isfinite(helper) and helper > 0
    assert mechanism.variance == (mechanism.sigma**2 if mechanism.sigma < 1e154 else math.inf)


@pytest.mark.parametrize("sigma", [7.0710678118654755e12, 1e100, 1e300])
@pytest.mark.parametrize("alpha", [0.5, 0.05, 1e-12, 1e-300])
def test_discrete_gaussian_accuracy_helpers_match_mpmath(sigma, alpha):
    """At sigma >> 1 the exact two-sided tail is P(|X| > h) = erfc((h + 1/2) / (sigma sqrt 2)) to a
    relative O(sigma^-2) (Euler-Maclaurin, midpoint rule; the normaliser is sigma sqrt(2 pi) to
    e^(-2 pi^2 sigma^2)). The tail helper is a rigorous upper bound within 1e-7 of it, the quantile
    valid and within 1e-7 of the smallest, E|X| = sigma sqrt(2 / pi)."""
    mechanism = DiscreteGaussian(1, sigma=sigma)
    # h to the unit: as many digits as sigma has, and 1 - alpha must keep alpha's digits.
    with mpmath.workdps(40 + int(math.log10(sigma)) + int(-math.log10(alpha))):
        s = mpmath.mpf(sigma)

        def exact_tail(h: int) -> Any:
            return mpmath.erfc((mpmath.mpf(h) + mpmath.mpf(1) / 2) / (s * mpmath.sqrt(2)))

        exact_h = int(mpmath.ceil(s * mpmath.sqrt(2) * mpmath.erfinv(1 - mpmath.mpf(alpha)) - mpmath.mpf(1) / 2))
        while exact_tail(exact_h) > alpha:
            exact_h += 1
        while exact_h > 0 and exact_tail(exact_h - 1) <= alpha:
            exact_h -= 1
        h = mechanism.noise_quantile(alpha)
        assert int(h) >= exact_h and exact_tail(int(h)) <= alpha
        assert int(h) <= exact_h * (1 + 1e-7) + 1
        for point in (exact_h, int(sigma // 2), int(3 * sigma)):
            exact = exact_tail(point)
            bound = mechanism.tail_probability(point)
            assert bound >= float(exact) * (1 - 1e-12)
            assert bound <= float(exact) * (1 + 1e-7) + 1e-300
        assert mechanism.expected_error == pytest.approx(float(s * mpmath.sqrt(2 / mpmath.pi)), rel=1e-12)
        assert float(mechanism.pmf(0)) == pytest.approx(float(1 / (s * mpmath.sqrt(2 * mpmath.pi))), rel=1e-12)


# ---------------------------------------------------------------------------------------------
# The Gaussian mechanism keeps its fine grid at every epsilon
# ---------------------------------------------------------------------------------------------

FINE_GRID_CASES = [
    (1.0, 1e-10, 1e-12, 1),  # before: grid 2^5, 32 Delta; after the previous fix 1.031 Delta
    (1.0, 1e-10, 1e-12, 100),  # before: 1.31 Delta
    (1.0, 1e-10, 1e-9, 4000),
    (1.0, 1e-12, 1e-12, 1),
    (1e6, 2.0**-60, 1e-300, 7),
    (2.0**-1000, 1e-10, 1e-12, 100),
    (1e290, 1e-10, 1e-12, 1),
]


@pytest.mark.parametrize(("sensitivity", "epsilon", "delta", "dimension"), FINE_GRID_CASES)
def test_gaussian_grid_stays_within_10_bits_of_the_fine_grid_at_every_epsilon(sensitivity, epsilon, delta, dimension):
    """The grid is 2^-20 of the L2 share, coarsened with the noise by at most 10 bits whatever epsilon,
    so Delta_eff <= (1 + 2^-10) Delta (the sampler takes any sigma); the release is finite and on the grid."""
    mechanism = Gaussian(sensitivity, epsilon, delta, dimension=dimension)
    fine = sensitivity_grid_exponent(sensitivity, dimension, norm=2)
    assert fine <= mechanism.grid_exponent <= fine + 10
    assert Fraction(mechanism.effective_sensitivity) <= GRID_SLACK * Fraction(sensitivity)
    value = np.linspace(-1.0, 1.0, dimension) * sensitivity if dimension > 1 else 0.25 * sensitivity
    released = np.atleast_1d(mechanism.release(value, rng=InsecureSeededRandom(60)))
    assert np.all(np.isfinite(released))
    units = [Fraction(float(v)) / Fraction(2) ** mechanism.grid_exponent for v in released]
    assert all(u.denominator == 1 for u in units)


@pytest.mark.parametrize(
    ("epsilon", "delta"), [(1e-6, 1e-12), (1e-8, 1e-12), (1e-10, 1e-12), (1e-12, 1e-12), (2.0**-60, 1e-300)]
)
def test_gaussian_calibration_is_rigorous_at_huge_sigma(epsilon, delta):
    """Dimension 1, sigma from 4e12 to 4e25 grid units: the released law's delta, computed in mpmath from
    the exact tails of N_Z(0, s^2) (CKS 2020, Thm 7; midpoint rule, relative O(s^-2)), is at most the
    rigorous bound dpkit calibrated against, which is at most the target; sigma is at least the
    continuous analytic sigma. (sigma's closeness to the continuous one at these epsilons is
    test_gaussian_delta_window.py's.)"""
    mechanism = Gaussian(1.0, epsilon, delta)
    assert mechanism.sigma >= analytic_gaussian_sigma(epsilon, delta, 1.0)
    assert Fraction(mechanism.effective_sensitivity) <= GRID_SLACK
    s_float = math.ldexp(mechanism.sigma, -mechanism.grid_exponent)
    a = int(round(mechanism.effective_sensitivity / math.ldexp(1.0, mechanism.grid_exponent)))
    with mpmath.workdps(80):
        s = mpmath.mpf(s_float)
        eps = mpmath.mpf(epsilon)

        def at_least(n: int) -> Any:  # P(Z >= n), Z ~ N_Z(0, s^2)
            return mpmath.erfc((mpmath.mpf(n) - mpmath.mpf(1) / 2) / (s * mpmath.sqrt(2))) / 2

        split = int(mpmath.floor(eps * s * s / a - mpmath.mpf(a) / 2)) + 1
        exact = max(at_least(n) - mpmath.exp(eps) * at_least(n + a) for n in (split - 1, split, split + 1))
    bound = discrete_gaussian_delta_upper(s_float, a, epsilon)
    assert float(exact) <= bound <= delta


@pytest.mark.statistical
def test_gaussian_noise_at_tiny_epsilon_has_its_law():
    """epsilon 1e-10, delta 1e-12: the noise / sigma is N(0, 1) (KS, and the sum of squares in its
    chi-square band), with sigma on the fine grid (the coarse grid's sensitivity was 1.031 Delta)."""
    mechanism = Gaussian(1.0, 1e-10, 1e-12)
    assert Fraction(mechanism.effective_sensitivity) <= GRID_SLACK
    n = 40_000
    noise = mechanism.release_repeated(0.0, n, rng=InsecureSeededRandom(61)) / mechanism.sigma
    assert ks_pvalue(noise, "norm") > FALSE_POSITIVE_RATE
    statistic = float(np.sum(noise**2))
    assert stats.chi2.ppf(FALSE_POSITIVE_RATE / 2, n) <= statistic <= stats.chi2.isf(FALSE_POSITIVE_RATE / 2, n)


@pytest.mark.parametrize(("sensitivity", "epsilon", "delta", "dimension"), FINE_GRID_CASES[:5])
@pytest.mark.parametrize("alpha", [0.05, 1e-12])
def test_gaussian_accuracy_helpers_match_mpmath_at_huge_sigma(sensitivity, epsilon, delta, dimension, alpha):
    """With s = sigma / 2^k grid units (1e16 and more here), P(|Z| >= m) = erfc((m - 1/2) / (s sqrt 2))
    to a relative O(s^-2): the half-width h = noise_quantile / 2^k has P(|Z| > h) <= alpha and is the
    smallest such to 1e-9; the interval is (-h, h); linf_tail_bound's t has K P(|Z| >= t) <= beta."""
    mechanism = Gaussian(sensitivity, epsilon, delta, dimension=dimension)
    k = mechanism.grid_exponent
    s_float = math.ldexp(mechanism.sigma, -k)
    assert s_float > 2.0**40
    with mpmath.workdps(60):
        s = mpmath.mpf(s_float)

        def at_least(m: int) -> Any:  # P(|Z| >= m), m >= 1
            return mpmath.erfc((mpmath.mpf(m) - mpmath.mpf(1) / 2) / (s * mpmath.sqrt(2)))

        h = mechanism.noise_quantile(alpha)
        units = int(Fraction(h) / Fraction(2) ** k)
        assert at_least(units + 1) <= alpha
        assert at_least(int(units * (1 - 1e-9))) > alpha
        assert mechanism.confidence_interval(alpha) == (-h, h)
        t = int(Fraction(mechanism.linf_tail_bound(alpha)) / Fraction(2) ** k)
        assert dimension * at_least(t) <= alpha
        assert dimension * at_least(int(t * (1 - 1e-9))) > alpha
        expected = float(mpmath.ldexp(s * mpmath.sqrt(2 / mpmath.pi), k))
        assert mechanism.expected_error == pytest.approx(expected, rel=1e-12)
