"""The additive mechanisms (Laplace, Staircase, Gaussian) at tiny epsilon and large dimension.

QA found that the public output grid coarsened with the noise (so that the noise stayed within
2^30 grid units): once the step passed the sensitivity share, the effective sensitivity became the
step and the noise grew far beyond nominal (Laplace mean |noise| * epsilon / Delta: 16.7 at
epsilon 1e-10, 1010 at 1e-12, 1584 at 1e-10 with dimension 100; Staircase effective sensitivity 16
at 1e-10; Gaussian 32 at epsilon 1e-10, delta 1e-12), and that beyond the discrete Laplace
sampler's 2**40 units a release failed at release time naming an internal ``scale``. Huge
sensitivities failed too: Laplace(1e300, 1e-5) and Gaussian(1e298, ...) were built, then refused
every release; Laplace(2**1000, 2**-60) raised about an internal ``noise_scale``.

These tests hold every accepted (sensitivity, epsilon, dimension) to the contract: the grid is
2^-20 of the sensitivity share, so the effective sensitivity is within 2^-20 of Delta (Staircase;
Gaussian wherever its sampler allows; Laplace's grid coarsens by at most 10 bits, within 2^-10),
the noise has its nominal law, releases and the
accuracy helpers work, and what cannot work is refused at construction naming the parameter.
Releases at ordinary epsilon are bit-for-bit those of the code before the change (golden digests).

Statistical tests use fixed seeds and thresholds from an explicit false-positive rate
(FALSE_POSITIVE_RATE) through scipy.stats.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpkit._errors import InvalidParameterError, PrivacyWarning
from dpkit.mechanisms import Gaussian, Laplace, Staircase
from dpkit.mechanisms.staircase import optimal_gamma_l2, staircase_expected_amplitude, staircase_noise_power
from dpkit.noise import InsecureSeededRandom

FALSE_POSITIVE_RATE = 1e-6
# Two-sided normal quantile of the false-positive rate, for z-tests on means.
Z_THRESHOLD = float(stats.norm.isf(FALSE_POSITIVE_RATE / 2))
# The documented grid rounding: Delta + d 2^k <= (1 + 2^-20) Delta (Staircase, and the Gaussian
# while the noise is within 2^30 units); Laplace's and the Gaussian's grids coarsen with the noise
# by at most 10 bits: (1 + 2^-10) Delta.
GRID_SLACK = Fraction(1) + Fraction(1, 2**20)
CAPPED_GRID_SLACK = Fraction(1) + Fraction(1, 2**10)

TINY_EPSILONS = [1e-4, 1e-8, 1e-10, 1e-12, 1e-15, 2.0**-60]
SENSITIVITIES = [1e-6, 1.0, 1e6]


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        yield


def exact_upper(value: float) -> Fraction:
    """The larger of a float's binary value and the decimal it was typed as (how dpkit reads it)."""
    return max(Fraction(value), Fraction(repr(value)))


def grid_multiples(mechanism: Any, values: Any) -> bool:
    scaled = np.ldexp(np.asarray(values, dtype=np.float64), -mechanism.grid_exponent)
    return bool(np.all(scaled == np.rint(scaled)))


# ---------------------------------------------------------------------------------------------
# Effective sensitivity and scale: nominal at every epsilon
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sensitivity", SENSITIVITIES)
@pytest.mark.parametrize("epsilon", TINY_EPSILONS)
@pytest.mark.parametrize("dimension", [1, 100, 4000])
def test_laplace_sensitivity_and_scale_are_nominal(sensitivity, epsilon, dimension):
    """Catches the unbounded coarsening: effective sensitivity 17 Delta at 1e-10, 1025 Delta at 1e-12
    (dimension 1)."""
    mechanism = Laplace(sensitivity, epsilon, dimension=dimension)
    delta = exact_upper(sensitivity)
    assert delta <= Fraction(mechanism.effective_sensitivity) <= CAPPED_GRID_SLACK * delta
    nominal = delta / Fraction(repr(epsilon))
    # The scale is (Delta + d 2^k) / epsilon rounded up by a few ulps.
    assert nominal <= Fraction(mechanism.scale) <= CAPPED_GRID_SLACK * nominal * (1 + Fraction(1, 2**48))
    assert mechanism.event.noise_multiplier * mechanism.effective_sensitivity <= mechanism.scale


@pytest.mark.parametrize("sensitivity", SENSITIVITIES)
@pytest.mark.parametrize("epsilon", TINY_EPSILONS)
def test_staircase_sensitivity_and_amplitude_are_nominal(sensitivity, epsilon):
    """Catches the coarsened grid: a step of one grid unit, effective sensitivity 16 Delta at 1e-10."""
    mechanism = Staircase(sensitivity, epsilon)
    delta = exact_upper(sensitivity)
    assert delta <= Fraction(mechanism.effective_sensitivity) <= GRID_SLACK * delta
    continuous = staircase_expected_amplitude(epsilon, sensitivity, mechanism.gamma)
    assert mechanism.expected_error == pytest.approx(continuous, rel=4e-6)


@pytest.mark.parametrize("epsilon", [1e-15, 1e-12, 1e-8, 1e-6, 1e-4])
def test_staircase_reference_moments_at_tiny_epsilon(epsilon):
    """gamma*_2 = 1/2 - epsilon/12 + O(epsilon^2), E|X| = Delta / epsilon and E X^2 = 2 Delta^2 / epsilon^2
    to first order. Catches 1 - e^-epsilon taken in float (4 digits at 1e-12: E|X| 2e-5 relative off)
    and the textbook gamma*_2 (complex at 1e-8, -1e12 at 1e-12)."""
    gamma = optimal_gamma_l2(epsilon)
    assert isinstance(gamma, float) and abs(gamma - (0.5 - epsilon / 12)) <= epsilon**2 + 1e-15
    assert staircase_expected_amplitude(epsilon) * epsilon == pytest.approx(1.0, rel=max(1e-12, epsilon))
    assert staircase_noise_power(epsilon, 1.0, 0.5) * epsilon**2 == pytest.approx(2.0, rel=max(1e-12, 2 * epsilon))


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0, 50.0])
def test_staircase_optimal_gamma_l2_matches_the_textbook_form(epsilon):
    """The cancellation-free form equals Geng & Viswanath's Thm 5 expression (in 60 digits)."""
    with mpmath.workdps(60):
        b = mpmath.exp(-mpmath.mpf(epsilon))
        third = mpmath.mpf(1) / 3
        textbook = -b / (1 - b) + (b - 2 * b**2 + 2 * b**4 - b**5) ** third / (2**third * (1 - b) ** 2)
        assert optimal_gamma_l2(epsilon) == pytest.approx(float(textbook), rel=1e-13)


def test_noise_on_the_grid_is_the_exact_sum_rounded_once():
    """add_noise_on_grid returns the exact integer sum times 2^k rounded to the nearest float (Fraction's
    float conversion is correctly rounded), saturating at the largest float, for int64 noise (numpy's
    float addition) and Python-integer noise alike."""
    from dpkit.noise import add_noise_on_grid

    rng = np.random.default_rng(7)
    largest = np.finfo(np.float64).max
    for exponent in (-1061, -1040, -60, -20, 0, 30, 900, 971):
        units = rng.integers(-(2**53), 2**53, 40).astype(np.float64)
        snapped = np.ldexp(units, exponent)
        small = rng.integers(-(2**52), 2**52, 40)
        wide = np.array([int(v) * 2**70 + int(w) for v, w in zip(small, small[::-1], strict=True)], dtype=object)
        for noise in (small, wide, np.array([2**1100, -(2**1100)] * 20, dtype=object)):
            got = add_noise_on_grid(snapped, noise, exponent)
            for value, z, out in zip(units, noise, got, strict=True):
                exact = (Fraction(int(value)) + int(z)) * Fraction(2) ** exponent
                expected = float(exact) if abs(exact) <= Fraction(largest) else (largest if exact > 0 else -largest)
                assert out == expected


# ---------------------------------------------------------------------------------------------
# Every accepted parameter builds, releases and reports; the rest is refused when built, by name
# ---------------------------------------------------------------------------------------------

EXTREME_SENSITIVITIES = [2.0**-1000, 1e-300, 1.0, 1e300, 2.0**1000]
EXTREME_EPSILONS = [2.0**-60, 1e-12, 1e-3, 1.0, 1024.0]


def _builders(sensitivity: float, epsilon: float) -> dict[str, Callable[[], Any]]:
    return {
        "laplace": lambda: Laplace(sensitivity, epsilon),
        "laplace-100": lambda: Laplace(sensitivity, epsilon, dimension=100),
        "laplace-4000": lambda: Laplace(sensitivity, epsilon, dimension=4000),
        "staircase": lambda: Staircase(sensitivity, epsilon),
        "gaussian": lambda: Gaussian(sensitivity, epsilon, 1e-5),
        "gaussian-100": lambda: Gaussian(sensitivity, epsilon, 1e-5, dimension=100),
    }


@pytest.mark.parametrize("kind", list(_builders(1.0, 1.0)))
@pytest.mark.parametrize("epsilon", EXTREME_EPSILONS)
@pytest.mark.parametrize("sensitivity", EXTREME_SENSITIVITIES)
def test_accepted_parameters_release_and_report(kind, epsilon, sensitivity):
    """Built means usable: a release of the largest magnitude below 2**1000 (and of 0) is finite and on
    the grid, and the accuracy helpers are finite. Refused means refused when built, naming epsilon.

    Catches releases failing with 'scale: ... must be at most 1.09951e+12 (2**40)' (Laplace below
    epsilon 1e-12, Staircase below 1e-12), 'value ... cannot be released on the output grid' for
    every value (any huge sensitivity), and 'noise_scale: got inf' or a bare OverflowError at
    construction."""
    try:
        mechanism = _builders(sensitivity, epsilon)[kind]()
    except InvalidParameterError as refused:
        assert refused.name == "epsilon", refused
        assert "2**1007" in refused.allowed or "2**40" in refused.allowed or "2**-60" in refused.allowed
        return
    dimension = getattr(mechanism, "dimension", 1)
    rng = InsecureSeededRandom(1)
    for value in (0.0, math.ldexp(0.99, 999)):
        limit = np.full(dimension, value) if dimension > 1 else value
        try:
            released = mechanism.release(limit, rng=rng)
        except InvalidParameterError as refused:
            # A value whose grid units overflow float64 (a fine grid: a small share Delta / d) is
            # refused by name, as before.
            assert refused.name == "value" and value >= math.ldexp(1.0, 1023 + mechanism.grid_exponent), refused
            continue
        assert np.all(np.isfinite(released)) and grid_multiples(mechanism, released)
    for alpha in (0.05, 1e-300):
        low, high = mechanism.confidence_interval(alpha)
        assert math.isfinite(high) and high == -low >= 0
        assert math.isfinite(mechanism.noise_quantile(alpha))
    assert math.isfinite(mechanism.expected_error) and mechanism.expected_error >= 0  # (underflows at 2**-1000, 1024)
    if hasattr(mechanism, "linf_tail_bound"):
        assert math.isfinite(mechanism.linf_tail_bound(0.05))


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda: Laplace(2.0**1000, 2.0**-60), "epsilon"),
        (lambda: Laplace(1e300, 1e-5), "epsilon"),
        (lambda: Staircase(2.0**1000, 1e-3), "epsilon"),
        (lambda: Gaussian(2.0**1000, 1e-10, 1e-12), "epsilon"),
        (lambda: Gaussian(1e298, 1e-10, 1e-5, dimension=100), "epsilon"),
        (lambda: Laplace(1.0, 1.0, dimension=2**40 + 1), "dimension"),
        (lambda: Gaussian(1.0, 1.0, 1e-5, dimension=2**40 + 1), "dimension"),
    ],
)
def test_unusable_parameters_are_refused_when_built_by_name(build, name):
    """Noise whose releases would leave float64 (scale 2**1007 and beyond) or more coordinates than
    a release can draw is refused at construction, naming the parameter and the allowed range.

    Catches 'noise_scale: got inf' (Laplace), a bare OverflowError (Staircase, Gaussian), mechanisms
    built only to refuse every release (Laplace(1e300, 1e-5)), and a dimension refused at release
    as an internal 'size'."""
    with pytest.raises(InvalidParameterError) as caught:
        build()
    assert caught.value.name == name
    assert "must" in caught.value.allowed


def test_the_smallest_accepted_epsilon_for_a_huge_sensitivity_releases():
    """The refusal names the bound; just above it the mechanism builds and releases a finite value."""
    with pytest.raises(InvalidParameterError, match="must be greater than") as caught:
        Laplace(2.0**1000, 2.0**-60)
    bound = float(caught.value.allowed.split("greater than ")[1].split(" ")[0])
    mechanism = Laplace(2.0**1000, bound * (1 + 1e-5))
    assert math.isfinite(mechanism.release(math.ldexp(0.99, 999), rng=InsecureSeededRandom(2)))
    assert mechanism.scale < 2.0**1007


# ---------------------------------------------------------------------------------------------
# The laws at tiny epsilon (noise drawn in two exact parts)
# ---------------------------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon, dimension, repeats", [(1e-12, 100, 300), (2.0**-60, 1, 20_000)])
def test_laplace_noise_has_the_nominal_law(epsilon, dimension, repeats):
    """noise * epsilon / Delta is Laplace(0, 1) (the discrete law on a grid 2^-10 of Delta / d, at
    most, is within 2^-9 of it), checked by a KS test and a z-test on mean |noise| (Var |Y| = b^2).

    Catches the coarsened grid (mean |noise| * epsilon: 1010 at 1e-12) and the failed releases
    (dimension 100 at 1e-12 and anything at 2**-60 raised 'scale ... 2**40')."""
    mechanism = Laplace(1.0, epsilon, dimension=dimension)
    zero = np.zeros(dimension) if dimension > 1 else 0.0
    noise = np.ravel(mechanism.release_repeated(zero, repeats, rng=InsecureSeededRandom(3))) * epsilon
    assert stats.kstest(noise, stats.laplace.cdf).pvalue > FALSE_POSITIVE_RATE
    n = noise.size
    assert abs(np.abs(noise).mean() - 1.0) <= Z_THRESHOLD / math.sqrt(n) + 2.0**-19


@pytest.mark.statistical
def test_staircase_noise_has_the_nominal_law():
    """At epsilon 1e-12, |noise| = Delta (G + offset) with G geometric of ratio e^-epsilon (drawn in
    two exact parts) and offset in [0, 1): |noise| * epsilon / Delta is Exp(1) to within 1e-6.

    Catches the coarsened grid (effective sensitivity 1024 Delta at 1e-12)."""
    epsilon = 1e-12
    mechanism = Staircase(1.0, epsilon)
    noise = mechanism.release_repeated(0.0, 20_000, rng=InsecureSeededRandom(4))
    magnitude = np.abs(noise) * epsilon
    assert stats.kstest(magnitude, stats.expon.cdf).pvalue > FALSE_POSITIVE_RATE
    assert abs(magnitude.mean() - 1.0) <= Z_THRESHOLD / math.sqrt(magnitude.size) + 1e-6
    # Both signs, equally often.
    positive = int(np.sum(noise > 0))
    assert stats.binomtest(positive, noise.size, 0.5).pvalue > FALSE_POSITIVE_RATE


@pytest.mark.statistical
def test_staircase_two_part_sampler_has_the_exact_law(monkeypatch):
    """The staircase sampler with its geometric step count drawn in two parts (the split lowered from
    a step scale of 2^36 to 2^2, so that t = 20 splits into a high part and 3 exact low bits), against
    the exact law pooled by sign, step and sub-step: mass q^g m (higher part, m - 1 for the negative
    side of step 0: zero has one sign) and q^g b' (W - m) (lower part)."""
    from dpkit.noise import _samplers

    monkeypatch.setattr(_samplers, "_FAST_SCALE_BITS", 2)
    mechanism = Staircase(1.0, 0.05)
    draws = mechanism._sample_units(200_000, InsecureSeededRandom(5))
    width, high, q, low_weight = mechanism.step_units, mechanism.high_units, mechanism._q, mechanism._low_weight
    steps = 40
    counts, masses = [], []
    magnitude = np.array([abs(int(z)) for z in draws], dtype=np.int64)
    negative = np.array([int(z) < 0 for z in draws])
    step, position = magnitude // width, magnitude % width
    for sign in (False, True):
        for g in range(steps):
            for upper_part in (True, False):
                inside = (negative == sign) & (step == g) & ((position < high) == upper_part)
                counts.append(int(inside.sum()))
                positions = (high - (1 if sign and g == 0 else 0)) if upper_part else (width - high) * low_weight
                masses.append(q**g * positions)
    counts.append(int(np.sum(step >= steps)))
    total = 2 * (high + (width - high) * low_weight) / (1 - q) - 1
    probabilities = np.array(masses) / total
    probabilities = np.append(probabilities, 1 - probabilities.sum())
    expected = probabilities * len(draws)
    chi2 = float(np.sum((np.array(counts) - expected) ** 2 / expected))
    assert stats.chi2.sf(chi2, len(counts) - 1) > FALSE_POSITIVE_RATE


# ---------------------------------------------------------------------------------------------
# Gaussian: no coarsening, whatever epsilon
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sensitivity, epsilon, delta, dimension",
    [
        (1.0, 1e-4, 1e-5, 100),  # before: 1.00015 Delta
        (1.0, 1e-3, 1e-10, 1),  # before: 1.0000076 Delta
        (1e6, 1e-4, 1e-10, 7),  # before: 1.00017 Delta
        (1.0, 2.0**-60, 1e-5, 1),
    ],
)
def test_gaussian_grid_is_not_coarsened_where_the_sampler_allows(sensitivity, epsilon, delta, dimension):
    """sqrt(d) sigma / Delta below 2^19: sigma fits the sampler's 2^40 units on the grid 2^-20 of the
    share Delta / sqrt(d), so the effective sensitivity is within 2^-20 of Delta."""
    mechanism = Gaussian(sensitivity, epsilon, delta, dimension=dimension)
    assert math.sqrt(dimension) * mechanism.sigma / sensitivity < 2.0**19
    assert Fraction(mechanism.effective_sensitivity) <= CAPPED_GRID_SLACK * Fraction(sensitivity) * (
        1 + Fraction(1, 2**40)
    )


@pytest.mark.parametrize(
    "sensitivity, epsilon, delta, dimension",
    [
        (1.0, 1e-10, 1e-12, 1),  # before: 32 Delta (grid 2^5), then 1.031 Delta (coarsened to 2^40 units)
        (1.0, 1e-10, 1e-9, 4000),  # sigma beyond 2^40 units even on the coarsest grid allowed
        (1.0, 1e-10, 1e-12, 100),  # before: 321 Delta, then 1.31 Delta
    ],
)
def test_gaussian_grid_is_not_coarsened_beyond_the_sampler_either(sensitivity, epsilon, delta, dimension):
    """Where sigma exceeds 2^40 units on the fine grid, the grid stays fine: the discrete Gaussian
    sampler is exact at any sigma (tests/mechanisms/test_integer_samplers_any_scale.py), so the
    effective sensitivity is within 2^-20 of Delta here too. (Until the sampler took any sigma, the grid
    coarsened to the finest one with sigma at most 2^40 units; this test pinned that.)"""
    mechanism = Gaussian(sensitivity, epsilon, delta, dimension=dimension)
    sigma_units = math.ldexp(mechanism.sigma, -mechanism.grid_exponent)
    assert sigma_units > 2.0**40
    assert Fraction(mechanism.effective_sensitivity) <= CAPPED_GRID_SLACK * Fraction(sensitivity) * (
        1 + Fraction(1, 2**40)
    )
    released = mechanism.release(np.zeros(dimension) if dimension > 1 else 0.0, rng=InsecureSeededRandom(6))
    assert np.all(np.isfinite(released))


# ---------------------------------------------------------------------------------------------
# Accuracy helpers at huge scales, against mpmath
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon, dimension", [(2.0**-60, 1), (2.0**-60, 4000), (1e-12, 100)])
@pytest.mark.parametrize("alpha", [0.5, 0.05, 1e-12, 1e-300])
def test_laplace_accuracy_helpers_at_huge_scales(epsilon, dimension, alpha, monkeypatch):
    """Units scale up to 2^92: the quantile is valid and the smallest (up to the stated 1e-12 margin),
    found in O(log) tail evaluations, and the union bound and E|noise| are exact.

    Catches the scale being the coarsened grid's (1025x nominal at 1e-12) and a linear scan from a
    float guess that is off by ~2^40 units at these scales."""
    mechanism = Laplace(1.0, epsilon, dimension=dimension)
    assert Fraction(mechanism.scale) <= CAPPED_GRID_SLACK / Fraction(repr(epsilon)) * (1 + Fraction(1, 2**48))
    calls = [0]
    original = Laplace._tail_units

    def counted(self: Laplace, m: int) -> float:
        calls[0] += 1
        return original(self, m)

    monkeypatch.setattr(Laplace, "_tail_units", counted)
    with mpmath.workdps(60):
        s = mpmath.ldexp(mpmath.mpf(mechanism.scale), -mechanism.grid_exponent)
        q = mpmath.exp(-1 / s)

        def at_least(n: int) -> Any:  # P(|Z| >= n) for the discrete Laplace law in grid units
            return mpmath.mpf(1) if n <= 0 else 2 * q**n / (1 + q)

        h = mechanism.noise_quantile(alpha)
        units = int(math.ldexp(h, -mechanism.grid_exponent))
        assert at_least(units + 1) <= alpha
        assert at_least(units) > alpha * (1 - 1e-11)
        t = int(math.ldexp(mechanism.linf_tail_bound(alpha), -mechanism.grid_exponent))
        assert dimension * at_least(t) <= alpha
        assert dimension * at_least(t - 1) > alpha * (1 - 1e-11)
        exact = mpmath.ldexp(2 * q / (1 - q**2), mechanism.grid_exponent)
        assert mechanism.expected_error == pytest.approx(float(exact), rel=1e-12)
    assert calls[0] < 800


@pytest.mark.parametrize("sensitivity, accuracy", [(1.0, 1e12), (1.0, 1e17), (1e6, 1e18), (2.0**1000, 1e300)])
def test_laplace_from_accuracy_at_tiny_epsilon(sensitivity, accuracy):
    """The least epsilon meeting a wide target is the continuous one, Delta ln(1/alpha) / accuracy, to
    within the grid's 2^-10: catches epsilon 19x too large at accuracy 1e12 (the unboundedly
    coarsened grid had effective sensitivity 17) and 4097x at 1e17."""
    alpha = 0.05
    mechanism = Laplace.from_accuracy(sensitivity, accuracy, alpha)
    assert mechanism.noise_quantile(alpha) <= accuracy
    continuous = sensitivity * math.log(1 / alpha) / accuracy
    # (plus the quantile's discreteness: one grid step in accuracy / 2^k)
    step = math.ldexp(1.0, mechanism.grid_exponent)
    assert continuous <= mechanism.epsilon <= continuous * (1 + 2.0**-9 + 2 * step / accuracy)
    assert Fraction(mechanism.effective_sensitivity) <= CAPPED_GRID_SLACK * Fraction(sensitivity)


@pytest.mark.parametrize("sensitivity, accuracy", [(1.0, 1e30), (2.0**1000, 1e305)])
def test_laplace_from_accuracy_beyond_the_smallest_epsilon_names_accuracy(sensitivity, accuracy):
    """A target met even at the smallest accepted epsilon (2**-60, or the one keeping the noise below
    2**1007) is refused naming ``accuracy``: it named an epsilon the caller never gave."""
    with pytest.raises(InvalidParameterError, match="smallest epsilon") as caught:
        Laplace.from_accuracy(sensitivity, accuracy, 0.05)
    assert caught.value.name == "accuracy"


# ---------------------------------------------------------------------------------------------
# Ordinary epsilon: bit-for-bit the releases of the code before the change
# ---------------------------------------------------------------------------------------------

# sha256 (first 16 hex digits) of one release and 20 repeated releases, seeded, computed with the
# code before the grid change (where its grid did not coarsen: every case below).
GOLDEN_DIGESTS = {
    "Laplace(0.37, 0.05, dimension=1)": "c00eeea5f3913187",
    "Laplace(0.37, 0.05, dimension=7)": "4af0f71a3976a6c6",
    "Laplace(0.37, 1.0, dimension=1)": "f5e605520900284d",
    "Laplace(0.37, 1.0, dimension=7)": "4e522b41bcd53862",
    "Laplace(0.37, 3.0, dimension=1)": "38b76c2fa6e341d6",
    "Laplace(0.37, 3.0, dimension=7)": "0bc81eb0216affdd",
    "Laplace(1.0, 0.05, dimension=1)": "040e04bb84d58484",
    "Laplace(1.0, 0.05, dimension=7)": "3ea1a5b467d6117b",
    "Laplace(1.0, 1.0, dimension=1)": "84299ffc8331f05a",
    "Laplace(1.0, 1.0, dimension=7)": "150b40f9adb05a37",
    "Laplace(1.0, 3.0, dimension=1)": "b7c7a72ec1baba38",
    "Laplace(1.0, 3.0, dimension=7)": "252db495ab26c10b",
    "Laplace(1000000.0, 0.05, dimension=1)": "a6e49328f4191b6e",
    "Laplace(1000000.0, 0.05, dimension=7)": "73ca4f9397d4ca19",
    "Laplace(1000000.0, 1.0, dimension=1)": "1a1a34c0eca9a79c",
    "Laplace(1000000.0, 1.0, dimension=7)": "e5d009c6f8d019a7",
    "Laplace(1000000.0, 3.0, dimension=1)": "3e3bb9b279a7070a",
    "Laplace(1000000.0, 3.0, dimension=7)": "8e36df099db1da86",
    "Staircase(0.37, 0.01)": "269211544dea7aae",
    "Staircase(0.37, 1.0)": "d647e6b9953e8a4d",
    "Staircase(0.37, 20.0)": "4dfd01d4f8f1709f",
    "Staircase(1.0, 0.01)": "f38575e1c875e616",
    "Staircase(1.0, 1.0)": "4f97e2d9e3da5f59",
    "Staircase(1.0, 20.0)": "606582b4de05929c",
    "Gaussian(1.0, 0.5, 1e-06, dimension=1)": "4ebfbfb9f0cb3575",
    "Gaussian(1.0, 0.5, 1e-06, dimension=3)": "d344348565968af2",
    "Gaussian(1.0, 1.0, 1e-06, dimension=1)": "04cfd932bab256c1",
    "Gaussian(1.0, 1.0, 1e-06, dimension=3)": "f0aaacdbd21e8c25",
}


def _ordinary_mechanisms() -> Iterator[tuple[str, Any]]:
    for sensitivity in (0.37, 1.0, 1e6):
        for epsilon in (0.05, 1.0, 3.0):
            for dimension in (1, 7):
                name = f"Laplace({sensitivity}, {epsilon}, dimension={dimension})"
                yield name, Laplace(sensitivity, epsilon, dimension=dimension)
    for sensitivity in (0.37, 1.0):
        for epsilon in (0.01, 1.0, 20.0):
            yield f"Staircase({sensitivity}, {epsilon})", Staircase(sensitivity, epsilon)
    for epsilon in (0.5, 1.0):
        for dimension in (1, 3):
            yield (
                f"Gaussian(1.0, {epsilon}, 1e-06, dimension={dimension})",
                Gaussian(1.0, epsilon, 1e-6, dimension=dimension),
            )


def test_releases_at_ordinary_epsilon_are_bit_identical_to_before():
    """Where the old grid did not coarsen, the grid, the draws and the float sums are unchanged."""
    for seed, (name, mechanism) in enumerate(_ordinary_mechanisms()):
        dimension = getattr(mechanism, "dimension", 1)
        values = np.linspace(-123.456, 1e6 + 0.1, dimension) if dimension > 1 else 1.0 / 3.0
        once = np.asarray(mechanism.release(values, rng=InsecureSeededRandom(seed)), dtype=np.float64)
        repeated = np.asarray(
            mechanism.release_repeated(values, 20, rng=InsecureSeededRandom(seed + 1)), dtype=np.float64
        )
        digest = hashlib.sha256(once.tobytes() + repeated.tobytes()).hexdigest()[:16]
        assert digest == GOLDEN_DIGESTS[name], name
