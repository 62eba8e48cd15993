"""QA 19: the Gaussian at epsilon beyond 709 and at subnormal delta, sum() of guarantees, NaN on the grid.

- Gaussian(1, 710, 1e-5) was refused ("needs noise sigma inf"): math.expm1(epsilon) overflowed in the
  discrete delta bound and read as sigma = inf, for every epsilon in (709, 2^300].
- analytic_gaussian_sigma at delta 1e-320 gave 54.6 (exact: 38.09) and at 5e-324 a NaN ValueError;
  analytic_gaussian_delta(1e300, 1, 1) raised a NaN ValueError; at epsilon 2^206 the calibrated sigma
  was 14% above the exact one (float cancellation of terms near epsilon).
- sum([PureDP(0.1)] * 10) raised TypeError (no __radd__ for sum's starting 0).
- snap_to_grid(NaN) said the value was too large in magnitude.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import mpmath
import numpy as np
import pytest

from dpkit import InvalidParameterError, PrivacyWarning
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, PureDP
from dpkit.mechanisms.gaussian import Gaussian, analytic_gaussian_delta, analytic_gaussian_sigma
from dpkit.noise import InsecureSeededRandom, snap_to_grid


def _exact_delta(sigma: float, epsilon: float, sensitivity: float = 1.0, digits: int = 60) -> Any:
    """Balle & Wang 2018, Thm 8, in mpmath: Phi(D/2s - e s/D) - e^e Phi(-D/2s - e s/D)."""
    with mpmath.workdps(digits):
        s, e, d = mpmath.mpf(sigma), mpmath.mpf(epsilon), mpmath.mpf(sensitivity)
        second = mpmath.exp(e + mpmath.log(mpmath.ncdf(-d / (2 * s) - e * s / d)))
        return mpmath.ncdf(d / (2 * s) - e * s / d) - second


def _gaussian(sensitivity: float, epsilon: float, delta: float, dimension: int = 1) -> Gaussian:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Gaussian(sensitivity, epsilon, delta, dimension=dimension)


@pytest.mark.parametrize("epsilon", [709.9, 710.0, 1000.0, 2.0**20, 2.0**45, 2.0**206.25, 2.0**300])
def test_gaussian_builds_and_releases_beyond_epsilon_709(epsilon):
    """Refused with "needs noise sigma inf" on the old code (expm1 overflow). sigma is the analytic
    sigma at the grid's effective sensitivity (about Delta_eff / sqrt(2 epsilon)), and it releases."""
    mechanism = _gaussian(1.0, epsilon, 1e-5)
    continuous = analytic_gaussian_sigma(epsilon, 1e-5, mechanism.effective_sensitivity)
    # Up to epsilon 2^14 the discrete bound keeps e^eps P(Z >= n + a) in log space (within 1e-9 of the
    # continuous sigma); beyond, it drops that term (safe, up to 3e-5 more sigma).
    assert continuous <= mechanism.sigma <= continuous * (1 + (1e-9 if epsilon <= 2.0**14 else 1e-4))
    noisy = mechanism.release([0.3], rng=InsecureSeededRandom(5))  # a seed: tests only
    assert np.all(np.isfinite(noisy)) and abs(noisy[0] - 0.3) < 10 * mechanism.sigma + 2.0**-19
    assert mechanism.expected_error >= 0 and mechanism.noise_quantile(0.05) >= 0


def test_gaussian_sigma_decreases_with_epsilon_up_to_2_300():
    """On a log grid over [1, 2^300] (refused from 710 on the old code) sigma only decreases, in
    dimension 1 and 3."""
    epsilons = [2.0**k for k in (0, 3, 6, 9, 9.5, 10, 13, 20, 33, 40, 64, 100, 150, 206.25, 250, 300)]
    for dimension in (1, 3):
        sigmas = [_gaussian(1.0, e, 1e-5, dimension).sigma for e in epsilons]
        assert all(0 < later < earlier for earlier, later in zip(sigmas, sigmas[1:], strict=False))


def test_analytic_sigma_at_large_epsilon_is_private_and_tight():
    """At epsilon 2^206.25 (sensitivity 2^20 + 1) the old code returned 14% too much sigma (float
    cancellation of terms near epsilon). The exact delta holds at sigma and fails 1e-9 below it."""
    sensitivity = 2.0**20 + 1
    for epsilon in (2.0**10, 2.0**40, 2.0**206.25, 2.0**300):
        sigma = analytic_gaussian_sigma(epsilon, 1e-5, sensitivity)
        digits = 60 + int(math.log2(epsilon) * 0.3)
        assert _exact_delta(sigma, epsilon, sensitivity, digits) <= mpmath.mpf(1e-5)
        assert _exact_delta(sigma * (1 - 1e-9), epsilon, sensitivity, digits) > mpmath.mpf(1e-5)


# (epsilon, delta, sigma from a 50-digit mpmath bisection on Balle & Wang's condition)
REFERENCES = [
    (1.0, 1e-5, 3.7306316348159418),
    (1.0, 1e-300, 36.8654978941111),
    (1.0, 1e-310, 37.483556781338749),
    (1.0, 1e-320, 38.091630837438936),
    (1.0, 5e-324, 38.290557503963609),
    (0.01, 1e-320, 3795.7782636380368),
    (10.0, 5e-324, 3.8467228641922793),
]


def test_analytic_sigma_matches_mpmath_down_to_subnormal_delta():
    """Old code: 54.6 at delta 1e-320 (43% too much noise) and a NaN ValueError at 5e-324. Now within
    a relative 2e-12 above the mpmath reference at every point, and the exact delta holds."""
    for epsilon, delta, reference in REFERENCES:
        sigma = analytic_gaussian_sigma(epsilon, delta)
        assert reference * (1 - 1e-15) <= sigma <= reference * (1 + 2e-12), (epsilon, delta)
        assert _exact_delta(sigma, epsilon) <= mpmath.mpf(delta), (epsilon, delta)


def test_analytic_delta_far_beyond_the_noise_needed_is_zero():
    """analytic_gaussian_delta(sigma=1e300, sensitivity=1, epsilon=1) raised a NaN ValueError: both
    log_ndtr terms underflowed to -inf. The exact delta is below e^-(10^599): 0.0."""
    assert analytic_gaussian_delta(1e300, 1.0, 1.0) == 0.0


@pytest.mark.parametrize("guarantee", [PureDP(0.1), ApproxDP(0.1, 1e-7), ZCDP(0.01), ApproxZCDP(0.01, 1e-7)], ids=repr)
def test_sum_of_guarantees_equals_repeated_addition(guarantee):
    """sum() raised TypeError (int 0 + guarantee had no __radd__). It now equals repeated + exactly."""
    repeated = guarantee
    for _ in range(9):
        repeated = repeated + guarantee
    assert sum([guarantee] * 10) == repeated
    assert 0 + guarantee == guarantee
    for other in (1, 0.0, False, True, None, "0"):
        with pytest.raises(TypeError):
            other + guarantee  # type: ignore[operator]


def test_sum_of_ten_pure_dp_tenths_is_exactly_one():
    """Old code: TypeError."""
    assert sum([PureDP(0.1)] * 10) == PureDP(1.0)
    assert sum([ApproxDP(0.1, 1e-7)] * 10) == ApproxDP(1.0, 1e-6)


@pytest.mark.parametrize("values", [[math.nan], [1.0, math.nan], [math.inf]])
def test_snap_to_grid_names_a_non_finite_value(values):
    """Old code: NaN was reported as "must be at most ... in magnitude"."""
    with pytest.raises(InvalidParameterError, match="must be a finite number") as caught:
        snap_to_grid(np.array(values), -2)
    assert caught.value.name == "value"
