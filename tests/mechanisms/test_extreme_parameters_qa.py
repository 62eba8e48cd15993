"""Regressions from a QA round: extreme privacy parameters and high-alpha accuracy targets.

- ``DiscreteLaplace.from_accuracy`` refused achievable targets at large alpha ("internal search
  failed" at alpha >= 0.995): it nudged epsilon up by 200 x (1 + 1e-12), which barely moves the tail
  when epsilon * m is tiny. It must return the least float epsilon meeting the target.
- A subnormal epsilon or rho (and other extreme values) ended in OverflowError, ZeroDivisionError or
  a hang instead of a typed :class:`~dpkit.InvalidParameterError` naming the parameter.

No randomness is used.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import mpmath
import pytest

from dpkit._errors import InvalidParameterError, PrivacyWarning
from dpkit.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Exponential,
    Gaussian,
    Geometric,
    Laplace,
    PermuteAndFlip,
    RandomizedResponse,
    ReportNoisyMax,
    SparseVector,
    Staircase,
)
from dpkit.noise import InsecureSeededRandom


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings(), mpmath.workdps(50):
        warnings.simplefilter("ignore", PrivacyWarning)
        yield


# ---------------------------------------------------------------------------------------------
# DiscreteLaplace.from_accuracy at large alpha
# ---------------------------------------------------------------------------------------------


def _exact_tail(mechanism: DiscreteLaplace, h: int) -> Any:
    """P(|Z| > h) = 2 q^(h+1) / (1 + q), q = exp(-1 / scale), in 50 digits."""
    q = mpmath.exp(-1 / mpmath.mpf(mechanism.scale))
    return 2 * q ** (h + 1) / (1 + q)


@pytest.mark.parametrize("alpha", [0.99, 0.995, 0.998, 0.999, 0.9999, 1 - 1e-8])
@pytest.mark.parametrize("accuracy", [0, 0.5, 1, 2, 10, 1000])
def test_discrete_laplace_from_accuracy_high_alpha_is_met_and_least(accuracy, alpha):
    """QA: accuracy=2, alpha=0.999 raised "could not be met (internal search failed)" although epsilon
    0.002 meets it. The result meets the target (exactly, against mpmath) and the next float below it,
    and epsilon (1 - 1e-6), miss it."""
    mechanism = DiscreteLaplace.from_accuracy(1, accuracy, alpha)
    h = int(mechanism.noise_quantile(alpha))
    assert h <= accuracy
    assert _exact_tail(mechanism, math.floor(accuracy)) <= alpha
    below = DiscreteLaplace(1, math.nextafter(mechanism.epsilon, 0.0))
    assert below.noise_quantile(alpha) > accuracy
    assert DiscreteLaplace(1, mechanism.epsilon * (1 - 1e-6)).noise_quantile(alpha) > accuracy


def test_discrete_laplace_from_accuracy_qa_reproducer():
    """The QA case itself: epsilon 0.002 meets accuracy 2 at alpha 0.999, so the answer is at most that."""
    assert DiscreteLaplace(1, 0.002).noise_quantile(0.999) <= 2
    mechanism = DiscreteLaplace.from_accuracy(1, 2, 0.999)
    assert mechanism.epsilon <= 0.002 and mechanism.noise_quantile(0.999) <= 2


@pytest.mark.parametrize("sensitivity", [1, 3, 10**6])
@pytest.mark.parametrize("alpha", [5e-324, 1e-300, 0.05, 0.9, 0.999])
def test_discrete_laplace_from_accuracy_least_across_alphas(sensitivity, alpha):
    mechanism = DiscreteLaplace.from_accuracy(sensitivity, 4, alpha)
    assert mechanism.noise_quantile(alpha) <= 4
    assert DiscreteLaplace(sensitivity, math.nextafter(mechanism.epsilon, 0.0)).noise_quantile(alpha) > 4


@pytest.mark.parametrize("accuracy, alpha", [(1e13, 0.05), (1e300, 0.05), (2, 1 - 1e-12)])
def test_discrete_laplace_from_accuracy_beyond_2_40_is_found(accuracy, alpha):
    """Targets whose least epsilon has a noise scale above 2^40 were refused (the sampler's limit then);
    the mechanism now takes scales up to 2^1007, so the least epsilon is found."""
    mechanism = DiscreteLaplace.from_accuracy(1, accuracy, alpha)
    assert mechanism.scale > 2.0**40 and mechanism.noise_quantile(alpha) <= accuracy
    assert DiscreteLaplace(1, math.nextafter(mechanism.epsilon, 0.0)).noise_quantile(alpha) > accuracy


@pytest.mark.parametrize("accuracy, alpha", [(1e305, 0.05), (1e306, 1e-300)])
def test_discrete_laplace_from_accuracy_below_the_smallest_epsilon_names_accuracy(accuracy, alpha):
    """Targets met even at the smallest epsilon the mechanism accepts (noise scale below 2^1007) have
    their least epsilon below that limit: refused naming ``accuracy`` (it named an epsilon the caller
    never gave)."""
    with pytest.raises(InvalidParameterError, match="smallest epsilon the mechanism accepts") as caught:
        DiscreteLaplace.from_accuracy(1, accuracy, alpha)
    assert caught.value.name == "accuracy"


# ---------------------------------------------------------------------------------------------
# Extreme privacy parameters at construction
# ---------------------------------------------------------------------------------------------

EXTREMES = [5e-324, 1e-310, 1e-300, 1e-200, 1e-30, 1e12, 1e200, 1e300, 1e308, math.inf, math.nan]

BUILDERS: dict[str, tuple[Callable[[float], Any], set[str]]] = {
    "DiscreteLaplace epsilon": (lambda v: DiscreteLaplace(1, v), {"epsilon"}),
    "DiscreteLaplace sensitivity": (lambda v: DiscreteLaplace(v, 1.0), {"sensitivity", "epsilon"}),
    "DiscreteLaplace constant-time": (lambda v: DiscreteLaplace(1, v, constant_time=True), {"epsilon"}),
    "Geometric epsilon": (lambda v: Geometric(1, v, 0, 10), {"epsilon"}),
    "Laplace epsilon": (lambda v: Laplace(1.0, v), {"epsilon"}),
    "Laplace sensitivity": (lambda v: Laplace(v, 1.0), {"sensitivity"}),
    "Laplace both": (lambda v: Laplace(v, v), {"sensitivity", "epsilon"}),
    "Gaussian epsilon": (lambda v: Gaussian(1.0, v, 1e-5), {"epsilon"}),
    "Gaussian sensitivity": (lambda v: Gaussian(v, 1.0, 1e-5), {"sensitivity"}),
    "Gaussian delta": (lambda v: Gaussian(1.0, 1.0, v), {"delta"}),
    "Gaussian classic": (lambda v: Gaussian(1.0, v, 1e-5, "classic"), {"epsilon"}),
    "DiscreteGaussian sigma": (lambda v: DiscreteGaussian(1, sigma=v), {"sigma"}),
    "DiscreteGaussian rho": (lambda v: DiscreteGaussian(1, rho=v), {"rho"}),
    "DiscreteGaussian sensitivity": (lambda v: DiscreteGaussian(v, rho=1.0), {"sensitivity", "rho"}),
    "DiscreteGaussian epsilon": (lambda v: DiscreteGaussian(1, epsilon=v, delta=1e-6), {"epsilon"}),
    "Staircase epsilon": (lambda v: Staircase(1.0, v), {"epsilon"}),
    "Staircase sensitivity": (lambda v: Staircase(v, 1.0), {"sensitivity"}),
    "Exponential epsilon": (lambda v: Exponential(1.0, v), {"epsilon"}),
    "ReportNoisyMax epsilon": (lambda v: ReportNoisyMax(1.0, v), {"epsilon"}),
    "PermuteAndFlip sensitivity": (lambda v: PermuteAndFlip(v, 1.0), {"sensitivity"}),
    "SparseVector epsilon": (lambda v: SparseVector(1.0, v, 0.0), {"epsilon"}),
    "RandomizedResponse epsilon": (lambda v: RandomizedResponse(v, k=1000), {"epsilon"}),
}


@pytest.mark.parametrize("value", EXTREMES)
@pytest.mark.parametrize("builder", list(BUILDERS))
def test_extreme_parameters_are_built_or_refused_by_name(builder, value):
    """Either the mechanism is built and states its guarantee, event and accuracy, or the parameter
    is refused with an InvalidParameterError naming it; never OverflowError / ZeroDivisionError / a
    NaN ValueError (QA: DiscreteLaplace(1, 1e-310) raised OverflowError from the scale's rounding)."""
    build, names = BUILDERS[builder]
    try:
        mechanism = build(value)
    except InvalidParameterError as error:
        assert error.name in names, error
        return
    assert mechanism.guarantee is not None and mechanism.event is not None
    mechanism.privacy_map(getattr(mechanism, "sensitivity", 1.0))
    if hasattr(mechanism, "noise_quantile"):
        assert math.isfinite(mechanism.noise_quantile(0.05))
        assert math.isfinite(mechanism.expected_error)


@pytest.mark.parametrize("epsilon", [5e-324, 1e-310])
def test_subnormal_epsilon_refused_like_a_tiny_one(epsilon):
    """The QA reproducer: refused by the limit on the noise scale (2**1007, where intervals and quantiles
    leave float64). (1e-300, refused too while the sampler stopped at 2**40, is now accepted.)"""
    with pytest.raises(InvalidParameterError, match="2\\*\\*1007") as caught:
        DiscreteLaplace(sensitivity=1, epsilon=epsilon)
    assert caught.value.name == "epsilon"
    assert isinstance(DiscreteLaplace(sensitivity=1, epsilon=1e-300).release(0, rng=InsecureSeededRandom(0)), int)


@pytest.mark.parametrize("rho", [5e-324, 1e-310])
def test_subnormal_rho_builds_and_releases(rho):
    """sigma = 1 / sqrt(2 rho) is 3.2e161 and 7.1e154: refused while the sampler stopped at 2**40, now
    exact (sigma below 2**1007). A rho whose sigma leaves that range is refused naming rho."""
    mechanism = DiscreteGaussian(1, rho=rho)
    assert isinstance(mechanism.release(0, rng=InsecureSeededRandom(0)), int)
    assert math.isfinite(mechanism.noise_quantile(0.05))
    with pytest.raises(InvalidParameterError, match="2\\*\\*1007") as caught:
        DiscreteGaussian(1e200, rho=rho)
    assert caught.value.name == "rho"


def test_constant_time_epsilon_too_large_for_its_delta_is_refused_at_construction():
    """The constant-time delta (1 + e^eps) tau reaches 1 from epsilon ~28 on; at 1e300 e^eps raised
    OverflowError when the guarantee was read. Refused when built instead; a small epsilon still works."""
    for epsilon in (30.0, 1e300):
        with pytest.raises(InvalidParameterError, match="constant-time delta") as caught:
            DiscreteLaplace(1, epsilon, constant_time=True)
        assert caught.value.name == "epsilon"
    assert DiscreteLaplace(1, 1.0, constant_time=True).guarantee.delta < 1e-9


def test_discrete_gaussian_tiny_sigma_quantile_terminates():
    """2 sigma^2 underflows below sigma ~1e-154: the weights were 0 / 0 = NaN and the quantile search
    never ended. The noise is then 0 with certainty."""
    mechanism = DiscreteGaussian(1e-300, rho=1.0)
    assert mechanism.noise_quantile(0.05) == 0.0
    assert mechanism.expected_error == 0.0
    assert DiscreteGaussian(1e-300, sigma=1e-200).pmf(0) == pytest.approx(1.0)


def test_discrete_gaussian_rho_sigma_is_smallest_float():
    """sigma for rho is the least float with sigma^2 >= Delta^2 / (2 rho), also where that ratio
    leaves the float range."""
    from fractions import Fraction

    for sensitivity, rho in ((1.0, 0.5), (3.0, 1e-20), (1e-300, 1.0), (1.0, 1e-300)):
        try:
            sigma = DiscreteGaussian(sensitivity, rho=rho).sigma
        except InvalidParameterError:
            continue
        target = Fraction(repr(sensitivity)) ** 2 / (2 * Fraction(repr(rho)))
        assert Fraction(sigma) ** 2 >= target > Fraction(math.nextafter(sigma, 0.0)) ** 2


@pytest.mark.parametrize("epsilon", [5e-324, 1e-310, 1e-30, 0.5, 1e200, 1e300])
@pytest.mark.parametrize("sensitivity", [5e-324, 1e-300, 1.0, 1e300, 1e308])
def test_gaussian_sigma_functions_answer_or_refuse_by_name(epsilon, sensitivity):
    """The free calibration functions raised OverflowError (sensitivity 1e308) or a NaN ValueError
    (epsilon 1e200); they now take the constructors' range and refuse outside it."""
    from dpkit.mechanisms.gaussian import analytic_gaussian_sigma, classic_gaussian_sigma

    for calibrate in (analytic_gaussian_sigma, classic_gaussian_sigma):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            try:
                sigma = calibrate(epsilon, 1e-6, sensitivity)
            except InvalidParameterError as error:
                assert error.name in ("epsilon", "sensitivity")
                continue
        assert 0 < sigma < math.inf
