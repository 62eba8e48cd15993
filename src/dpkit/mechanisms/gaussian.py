"""The Gaussian mechanism, calibrated analytically (Balle & Wang 2018) or classically, on a public grid.

A query with L2 sensitivity Delta is released as f(D) + Y, Y_i ~ N(0, sigma^2).

Calibrations
------------
- ``"classic"`` (Dwork & Roth 2014, Thm A.1; seed 000): sigma = sqrt(2 ln(1.25/delta)) Delta / epsilon,
  a theorem stated for epsilon < 1 only: larger epsilons are refused.
- ``"analytic"`` (Balle & Wang 2018, "Improving the Gaussian mechanism for differential privacy:
  analytical calibration and optimal denoising", ICML, Thm 8 / Algorithm 1): the smallest sigma with
  Phi(Delta/(2 sigma) - epsilon sigma/Delta) - e^epsilon Phi(-Delta/(2 sigma) - epsilon sigma/Delta) <= delta,
  which is the exact (epsilon, delta) curve of the Gaussian; valid for every epsilon > 0.

Floating-point safety and the law actually released
---------------------------------------------------
No continuous Gaussian is ever sampled (Mironov 2012). The value is rounded to the public grid
2^k and *discrete Gaussian* noise N_Z(0, (sigma / 2^k)^2) in grid units is added (Canonne, Kamath &
Steinke 2020, "The discrete Gaussian for differential privacy"), so every output is a multiple of 2^k.
Rounding moves neighbouring values apart by at most one grid step per coordinate: the snapped query
has L2 sensitivity at most Delta + sqrt(d) 2^k, and sigma is calibrated for that effective sensitivity.

The grid is 2^-20 of the per-coordinate share Delta / sqrt(d) (:func:`dpkit.noise.sensitivity_grid_exponent`)
while sigma stays within 2^30 grid units; beyond, it coarsens with the noise (fewer, faster draws)
but by at most 10 bits (:func:`dpkit.noise.capped_grid_exponent`), so Delta + sqrt(d) 2^k <=
(1 + 2^-10) Delta at every epsilon and delta. A small epsilon then means a large sigma in grid units:
the discrete Gaussian sampler is exact at any sigma (beyond 2^40 units its proposals are drawn in
Python integers), and the value plus the noise is one exact integer rounded once to a float
(:func:`dpkit.noise.add_noise_on_grid`, post-processing). Only a sigma reaching
:data:`dpkit.noise.MAX_RELEASE_SCALE` (2^1007, outputs beyond float64) is refused at construction,
naming epsilon.

The discrete Gaussian is (Delta^2 / (2 sigma^2))-zCDP exactly like the continuous one (CKS 2020,
Thm 14), but its (epsilon, delta) curve is not literally the continuous one, so the (epsilon, delta)
claim is proved for the discrete law itself:

- dimension 1: CKS 2020, Thm 7 gives delta = P[Z > eps s^2/a - a/2] - e^eps P[Z > eps s^2/a + a/2]
  for Z ~ N_Z(0, s^2) and integer sensitivity a (grid units). dpkit bounds this difference rigorously
  against Gaussian integrals, both as two tails and as the window P(n <= Z < n + a) less
  (e^eps - 1) P(Z >= n + a), which keeps its relative accuracy at tiny epsilon where delta is far
  below the tails (:func:`discrete_gaussian_delta_upper`), and calibrates sigma against that upper
  bound: sigma lies within about one part in 10^9 of the continuous analytic sigma at the effective
  sensitivity, from epsilon 2^-60 up.
- dimension > 1: the multivariate discrete Gaussian's (epsilon, delta) curve has no closed form,
  so sigma is calibrated through its zCDP guarantee with the tight conversion of CKS 2020, Cor. 13
  (a little more noise than the continuous analytic calibration, but rigorous).
"""

from __future__ import annotations

import math
import sys
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError, PrivacyWarning
from dpkit._lazy import LazyModule
from dpkit._search import first_true
from dpkit._validation import check_delta, check_epsilon, check_integer, check_positive, warn_if_risky
from dpkit.events import GaussianEvent, PrivacyEvent
from dpkit.guarantees import ApproxDP, round_up
from dpkit.mechanisms._base import NumericMechanism, check_alpha, check_noise_range
from dpkit.mechanisms.geometric import float_up
from dpkit.mechanisms.laplace import _round_down, check_dimension, check_release_value, shape_like, stack_like
from dpkit.noise import (
    MAX_RELEASE_SCALE,
    RandomSource,
    add_noise_on_grid,
    discrete_gaussian,
    resolve_source,
    snap_to_grid,
)
from dpkit.noise._grid import capped_grid_exponent

optimize = LazyModule("scipy.optimize")
special = LazyModule("scipy.special")
mpmath = LazyModule("mpmath")

__all__ = [
    "Gaussian",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "discrete_gaussian_delta_upper",
]

_CALIBRATIONS = ("analytic", "classic")
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
# Relative margins absorbing the float error of log_ndtr / exp (a few ulps) with a wide berth.
_UP = 1 + 1e-12
_DOWN = 1 - 1e-12
_LARGEST_LOG_FLOAT = math.log(sys.float_info.max)
_SMALLEST_SUBNORMAL = math.ldexp(1.0, -1074)


# ---------------------------------------------------------------------------------------------
# The continuous Gaussian's exact (epsilon, delta) curve (Balle & Wang 2018, Thm 8)
# ---------------------------------------------------------------------------------------------


def analytic_gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """delta(epsilon) of the continuous Gaussian mechanism N(0, sigma^2) at L2 sensitivity ``sensitivity``.

    Balle & Wang 2018, Thm 8: delta = Phi(D/(2s) - e s/D) - e^e Phi(-D/(2s) - e s/D), computed in
    log space (scipy's log_ndtr) so that tiny deltas keep their relative accuracy. Where the two
    terms agree to within a factor e^0.5 (small D / s: small epsilon with tiny delta) their
    difference loses digits in double precision (up to 5, which made calibrated sigmas up to
    1.3e-5 too optimistic in delta), so it is then computed in mpmath with enough digits.

    >>> f"{analytic_gaussian_delta(4.0, 1.0, 1.0):.3e}"
    '2.924e-06'
    """
    s = check_positive("sigma", sigma)
    d = check_positive("sensitivity", sensitivity)
    e = check_positive("epsilon", epsilon, allow_zero=True)
    log_first, gap = _log_terms(s, d, e)
    if log_first == -math.inf:
        return 0.0  # Phi(D/(2s) - e s/D) < e^-745 (log_ndtr underflowed): delta rounds to 0
    if gap > 0.5:
        return math.exp(log_first) * -math.expm1(-gap)
    return float(_balle_wang_delta(s, d, e, _cancellation_digits(gap)))


#: Above this epsilon Balle & Wang's terms are formed without float cancellation (:func:`_log_terms`).
_LARGE_EPSILON = 512.0
_LOG_HALF_PI = 0.5 * math.log(math.pi / 2)


def _log_mills(t: float) -> float:
    """log R(t), R(t) = Phi(-t) / phi(t) = sqrt(pi/2) erfcx(t / sqrt 2) (Mills' ratio), for t >= 0."""
    return math.log(float(special.erfcx(t / math.sqrt(2)))) + _LOG_HALF_PI


def _log_terms(sigma: float, sensitivity: float, epsilon: float) -> tuple[float, float]:
    """(log Phi(x), the gap from it down to log(e^e Phi(y))) in float, x = D/(2s) - e s/D and
    y = -D/(2s) - e s/D: Balle & Wang's two terms in log space (gap inf where the second
    underflows, nan where both do).

    Up to epsilon 512 both are read off log_ndtr. Beyond, x is the difference of two terms near
    sqrt(epsilon / 2) and e + log Phi(y) that of two near epsilon: in float they lost every digit
    (at epsilon 2^206 the calibrated sigma came out 14% above the exact one). There x is formed
    exactly, (D^2 - 2 e s^2) / (2 s D) in fractions, and e^e phi(y) = phi(x) (expand y^2 = x^2 + 2e)
    turns the second term into phi(x) R(-y), R Mills' ratio, so the gap is log R(-x) - log R(-y)
    where x < 0: no large term cancels.
    """
    if epsilon <= _LARGE_EPSILON:
        log_first = float(special.log_ndtr(sensitivity / (2 * sigma) - epsilon * sigma / sensitivity))
        log_second = epsilon + float(special.log_ndtr(-sensitivity / (2 * sigma) - epsilon * sigma / sensitivity))
        return log_first, log_first - log_second
    d, s, e = Fraction(sensitivity), Fraction(sigma), Fraction(epsilon)
    x = float((d * d - 2 * e * s * s) / (2 * s * d))
    minus_y = float((d * d + 2 * e * s * s) / (2 * s * d))
    log_first = float(special.log_ndtr(x))
    if x < 0:
        return log_first, _log_mills(-x) - _log_mills(minus_y)
    log_second = -0.5 * x * x - _LOG_SQRT_2PI + _log_mills(minus_y)
    return log_first, log_first - log_second


def _cancellation_digits(gap: float) -> int:
    """mpmath digits for Balle & Wang's difference when its terms agree to within e^gap: about
    log10(1 / gap) digits cancel; work with 40 more than that (at most 400)."""
    return min(40 + int(-math.log10(max(abs(gap), 1e-300))), 400)


def _log_analytic_gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """log of :func:`analytic_gaussian_delta` (-inf for delta 0), without its underflow: accurate to
    a few ulps of |log delta| (below 1e-12 relative) also where delta is subnormal or far below
    the float range (the float delta keeps only a few bits there: 1e-320 has 6)."""
    log_first, gap = _log_terms(sigma, sensitivity, epsilon)
    if log_first == -math.inf:
        # Both log_ndtr underflowed (|z| beyond ~1e154): bound delta <= Phi(z) by Mills' ratio in mpmath.
        value = _balle_wang_delta(sigma, sensitivity, epsilon, 40)
    elif gap > 0.5:
        return log_first + math.log(-math.expm1(-gap))
    else:
        value = _balle_wang_delta(sigma, sensitivity, epsilon, _cancellation_digits(gap))
    return float(mpmath.log(value)) if value > 0 else -math.inf


def _balle_wang_delta(sigma: float, sensitivity: float, epsilon: float, digits: int) -> Any:
    """Balle & Wang's delta(epsilon) (see :func:`analytic_gaussian_delta`) as an mpmath number at ``digits``
    digits, clamped at 0: for where the two terms cancel in double precision (also used by
    ``dpkit.accounting``'s mu-GDP profile, with sigma = 1 and sensitivity = mu)."""
    with mpmath.workdps(digits):
        s, d, e = mpmath.mpf(sigma), mpmath.mpf(sensitivity), mpmath.mpf(epsilon)
        first = d / (2 * s) - e * s / d
        if first < -1e100:
            # mpmath's ncdf fails beyond about -1e154; delta <= Phi(z) <= phi(z) / |z| (Mills' ratio).
            return mpmath.exp(-first * first / 2) / (-first * mpmath.sqrt(2 * mpmath.pi))
        value = mpmath.ncdf(first) - mpmath.exp(e) * mpmath.ncdf(-d / (2 * s) - e * s / d)
        return value if value > 0 else mpmath.mpf(0)


#: The largest epsilon the analytic calibration computes in float (e^epsilon sigma inside log_ndtr).
_LARGEST_EPSILON = 2.0**300


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma whose continuous Gaussian mechanism is (epsilon, delta)-DP (Balle & Wang 2018, Alg. 1).

    delta(sigma) is decreasing; the root is bracketed and found by Brent's method, then moved up
    until ``analytic_gaussian_delta(sigma) <= delta`` holds in float.

    >>> round(analytic_gaussian_sigma(1.0, 1e-5), 4)
    3.7306
    """
    e = check_epsilon(epsilon)
    target = check_delta(delta, allow_zero=False)
    d = check_positive("sensitivity", sensitivity)
    check_noise_range(d, e, largest_epsilon=_LARGEST_EPSILON)  # (beyond, the search leaves the float range)

    log_target = math.log(target)
    # Below the normal floats the float delta keeps too few bits (at delta 1e-320 sigma came out 43%
    # too large, at 5e-324 a NaN): there the search and its final check run on log delta.
    tiny = target < sys.float_info.min
    # delta(sigma) is clamped from below (it underflows far above the root) at a floor well under the
    # target: 1e-320 as always, or 50 nats below a target that is itself below 1e-320.
    floor = min(math.log(1e-320), log_target - 50.0)

    def excess(log_sigma: float) -> float:
        sigma = math.exp(log_sigma)
        if tiny:
            return max(_log_analytic_gaussian_delta(sigma, d, e), floor) - log_target
        return math.log(max(analytic_gaussian_delta(sigma, d, e), 1e-320)) - log_target

    def exceeds(sigma: float) -> bool:
        if tiny:  # with a relative 1e-12 berth for the float error of log delta (|log delta| < 745)
            return _log_analytic_gaussian_delta(sigma, d, e) > log_target - 1e-12 * abs(log_target)
        return analytic_gaussian_delta(sigma, d, e) > target

    low, high = math.log(d) - 10.0, math.log(d) + 2.0
    while excess(high) > 0:
        high += 2.0
    while excess(low) < 0:
        low -= 2.0
    root = optimize.brentq(excess, low, high, xtol=1e-15, rtol=1e-15, maxiter=500)
    # A relative 1e-12 above the float root keeps the claim true in exact arithmetic too.
    sigma = round_up(math.exp(root) * (1 + 1e-12))
    while exceeds(sigma):
        sigma = round_up(sigma * (1 + 1e-12))
    return sigma


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """sigma = sqrt(2 ln(1.25/delta)) Delta / epsilon (Dwork & Roth 2014, Thm A.1), for 0 < epsilon < 1.

    >>> round(classic_gaussian_sigma(0.5, 1e-5), 4)
    9.6896
    """
    e = check_epsilon(epsilon)
    if e >= 1:
        raise InvalidParameterError(
            "epsilon",
            epsilon,
            "must be < 1 for the classic calibration (the theorem holds for epsilon < 1); use calibration='analytic'",
        )
    target = check_delta(delta, allow_zero=False)
    d = check_positive("sensitivity", sensitivity)
    check_noise_range(d, e)
    return round_up(math.sqrt(2 * math.log(1.25 / target)) * d / e)


# ---------------------------------------------------------------------------------------------
# A rigorous upper bound on the discrete Gaussian's delta (CKS 2020, Thm 7)
# ---------------------------------------------------------------------------------------------


def _log_theta_upper(sigma: float) -> float:
    if sigma < 0.25:
        # Below, the 39 Poisson terms leave out terms of order e^(-3200 pi^2 s^2) (2e-10 at s = 0.026,
        # where e^eps P(Z >= 1) is still a float: reachable from epsilon ~2^39 on). Sum directly:
        # N = 1 + 2 sum_{z >= 1} q^(z^2) <= 1 + 2 q / (1 - q^2), q = e^(-1/2s^2) (as z^2 >= 2z - 1).
        q = math.exp(-0.5 / sigma / sigma)
        log_theta = math.log1p(2 * q / (1 - q * q)) - math.log(sigma) - _LOG_SQRT_2PI
        return log_theta + 2.0**-44 * (1 + abs(log_theta))
    # Poisson summation: sum_z exp(-z^2/2s^2) = s sqrt(2 pi) (1 + 2 sum_k exp(-2 pi^2 s^2 k^2)).
    # (exp underflows to 0 from sigma ~ 6 on; sigma**2 alone would overflow beyond 1e154)
    first = math.exp(-2 * math.pi**2 * sigma**2) if sigma < 1e3 else 0.0
    return math.log1p(3 * first) if sigma >= 1 else math.log1p(2 * sum(first ** (k * k) for k in range(1, 40)) * _UP)


def _log_tail_bounds(n: int, sigma: float) -> tuple[float, float]:
    """(log lower, log upper) bounds on P(Z >= n), Z ~ N_Z(0, sigma^2), for an integer n >= 1.

    With f(z) = exp(-z^2/2s^2) and N = sum_z f(z) in [s sqrt(2 pi), s sqrt(2 pi) theta] (Poisson summation):
    f is decreasing on z >= 0, so int_n^inf f <= sum_{z >= n} f(z) <= f(n) + int_n^inf f; where f is also
    convex (z >= s) the midpoint and trapezoid rules sharpen these to
    int_n^inf f + f(n)/2 <= sum_{z >= n} f(z) <= int_{n - 1/2}^inf f.
    """
    x = n / sigma
    log_q = float(special.log_ndtr(-x))
    log_density = -0.5 * x * x - _LOG_SQRT_2PI - math.log(sigma)  # log of f(n) / (s sqrt(2 pi))
    if n - 0.5 >= sigma:
        upper = float(special.log_ndtr(-(n - 0.5) / sigma))
    else:
        upper = float(np.logaddexp(log_q, log_density))
    if n >= sigma:
        lower = float(np.logaddexp(log_q, log_density - math.log(2.0)))
    else:
        lower = log_q
    return lower - _log_theta_upper(sigma) + math.log(_DOWN), upper + math.log(_UP)


def _tail_bounds(n: int, sigma: float) -> tuple[float, float]:
    """(lower, upper) bounds on P(Z >= n) for any integer n (symmetry for n <= 0)."""
    if n >= 1:
        low, high = _log_tail_bounds(n, sigma)
        return math.exp(low), math.exp(high)
    low, high = _log_tail_bounds(1 - n, sigma)  # P(Z >= n) = 1 - P(Z >= 1 - n)
    return max(0.0, 1 - math.exp(high)), min(1.0, 1 - math.exp(low))


def _log_run_upper(low: int, high: int, sigma: float) -> float:
    """Upper bound on log sum_{z=low}^{high} f(z), f(z) = exp(-z^2 / 2s^2), for integers 0 <= low <= high.

    f decreases on z >= 0, so the sum is at most f(low) + int_low^high f, and with x = low / s,
    h = (high - low) / s: int_low^high f = s f(low) int_0^h e^(-x t - t^2/2) dt <= s f(low) (1 - e^(-x h)) / x
    (h where x = 0). The float log gets a relative 2^-44 berth on each of its parts.
    """
    x = low / sigma
    h = (high - low) / sigma
    spread = h if x == 0 else -math.expm1(-x * h) / x
    half_square = 0.5 * x * x
    rest = math.log1p(sigma * spread)
    return -half_square + rest + 2.0**-44 * (1 + half_square + rest)


def _log_window_upper(n: int, shift: int, sigma: float) -> float:
    """Upper bound on log P(n <= Z < n + a), Z ~ N_Z(0, sigma^2), a = ``shift``: the window's sum of
    f (:func:`_log_run_upper`, folded onto z >= 0 by symmetry) over N = sum_z f(z) >= s sqrt(2 pi)
    (Poisson summation: every correction term is positive)."""
    last = n + shift - 1
    if n >= 0:
        log_sum = _log_run_upper(n, last, sigma)
    elif last <= 0:
        log_sum = _log_run_upper(-last, -n, sigma)
    else:  # the window holds 0: z in [0, last] and z in [1, -n]
        log_sum = float(np.logaddexp(_log_run_upper(0, last, sigma), _log_run_upper(1, -n, sigma))) + 2.0**-50
    log_norm = math.log(sigma) + _LOG_SQRT_2PI
    return log_sum - log_norm + 2.0**-44 * (1 + abs(log_norm))


def _delta_at_split(n: int, shift: int, sigma: float, epsilon: float) -> float:
    """Upper bound on P(Z >= n) - e^eps P(Z >= n + a): the smaller of two rigorous bounds.

    - Tails: P(Z >= n) from above minus e^eps P(Z >= n + a) from below. Both tails carry relative
      1e-12 margins, which is fine while delta is a fair share of them.
    - Window: the same difference is P(n <= Z < n + a) - (e^eps - 1) P(Z >= n + a); the window is
      bounded on its own (:func:`_log_window_upper`), so tiny epsilons, where delta is far below both
      tails (and their margins), keep their relative accuracy.
    """
    _, first_upper = _tail_bounds(n, sigma)
    second_lower, _ = _tail_bounds(n + shift, sigma)
    if first_upper <= 0:
        return 0.0
    if second_lower >= sys.float_info.min:
        log_second = math.log(second_lower)
        subtracted = _expm1_times_lower(epsilon, second_lower)
    else:
        # The tail underflowed or is subnormal (a few bits, and exp may have rounded it up): use its
        # log lower bound instead, which e^epsilon (epsilon up to 2^14 here) may lift back into the
        # float range; dropping it (as up to epsilon 709 before) gave 5e-4 too much sigma at epsilon 1000.
        log_second = _log_tail_lower(n + shift, sigma)
        if not (epsilon <= _LOG_SPACE_EPSILON and log_second >= -_LOG_SPACE_EPSILON):
            log_second = -math.inf  # epsilon + log_second would lose too many digits: drop the term (safe)
        subtracted = _expm1_times_log_lower(epsilon, log_second)
    log_first = math.log(first_upper)
    # Lowered by a bound on the float error of the sum (two roundings, each half an ulp of the
    # largest term, and log's own ulp): 1 - e^log_ratio is then an upper bound, also where the two
    # tails nearly agree and the sum's error would outweigh the 1e-12 berth (epsilon near 700).
    log_ratio = epsilon + log_second - log_first
    if math.isfinite(log_ratio):
        log_ratio -= 4 * math.ulp(max(abs(epsilon), abs(log_second), abs(log_first)))
    tails = first_upper * -math.expm1(log_ratio) if log_ratio < 0 else 0.0
    window = math.exp(_log_window_upper(n, shift, sigma)) * _UP
    window -= subtracted
    return min(tails, max(0.0, window * _UP))


#: Largest epsilon and |log P| for which epsilon + log P keeps an absolute error below 1e-11 (ulp 2^-38).
_LOG_SPACE_EPSILON = 2.0**14


def _log_tail_lower(n: int, sigma: float) -> float:
    """A lower bound on log P(Z >= n) (-inf for 0), kept in log space where n >= 1."""
    if n >= 1:
        return _log_tail_bounds(n, sigma)[0]
    low, _ = _tail_bounds(n, sigma)  # at least about 1/2: a normal float
    return math.log(low) if low > 0 else -math.inf


def _expm1_times_log_lower(epsilon: float, log_probability: float) -> float:
    """A lower bound on (e^epsilon - 1) e^log_probability (inf where it passes the float range), for
    epsilon, |log_probability| <= 2^14: their float sum is off by less than 1e-11, within the 1e-10
    berth; a subnormal result is stepped two units down (exp may round it up)."""
    if log_probability == -math.inf:
        return 0.0
    log_product = epsilon + log_probability + math.log(-math.expm1(-epsilon))
    if log_product > _LARGEST_LOG_FLOAT:
        return math.inf
    product = math.exp(log_product) * (1 - 1e-10)
    if product < sys.float_info.min:
        product = max(0.0, product - 2 * _SMALLEST_SUBNORMAL)
    return product


#: Largest epsilon whose e^epsilon - 1 is a finite float (math.expm1 overflows beyond ~709.78).
_LARGEST_EXPM1_ARGUMENT = 709.0


def _expm1_times_lower(epsilon: float, probability: float) -> float:
    """A lower bound on (e^epsilon - 1) * ``probability`` (a float >= 0), inf where it passes the float range.

    Up to epsilon 709 this is expm1(epsilon) (1 - 1e-12) probability, as before; beyond, expm1
    overflows (it read as sigma = inf: Gaussian(1, 710, 1e-5) was refused), so the product is
    formed in log space: e^(epsilon + log p) (1 - e^-epsilon) with e^-epsilon < 1e-307, and a
    1e-10 relative berth for the float error of epsilon + log p (|log p| < 746, epsilon < 1500
    wherever the result is finite).
    """
    if probability <= 0:
        return 0.0
    if epsilon <= _LARGEST_EXPM1_ARGUMENT:
        return math.expm1(epsilon) * _DOWN * probability
    log_product = epsilon + math.log(probability)
    if log_product > _LARGEST_LOG_FLOAT:
        return math.inf
    return math.exp(log_product) * (1 - 1e-10)


def discrete_gaussian_delta_upper(sigma_units: float, shift_units: int, epsilon: float) -> float:
    """Rigorous upper bound on delta(epsilon) of the discrete Gaussian N_Z(0, s^2) at integer sensitivity a.

    CKS 2020, Thm 7: delta = P[Z > eps s^2/a - a/2] - e^eps P[Z > eps s^2/a + a/2]. With n the smallest
    integer above eps s^2/a - a/2 (computed exactly from the floats' binary values), this is
    P(Z >= n) - e^eps P(Z >= n + a), bounded by :func:`_delta_at_split`. The split is also tried at
    n - 1 and n + 1 (the true delta is the maximum over split points, so a neighbour only gives less).

    >>> f"{discrete_gaussian_delta_upper(400.0, 100, 1.0):.3e}"   # continuous: 2.924e-06
    '2.925e-06'
    """
    s = check_positive("sigma_units", sigma_units)
    a = check_integer("shift_units", shift_units, minimum=1)
    e = check_positive("epsilon", epsilon, allow_zero=True)
    split = math.floor(Fraction(e) * Fraction(s) ** 2 / a - Fraction(a, 2)) + 1
    best = max(_delta_at_split(n, a, s, e) for n in (split - 1, split, split + 1))
    return min(1.0, best)


def _zcdp_delta(rho: float, epsilon: float) -> float:
    """delta for which rho-zCDP implies (epsilon, delta)-DP (CKS 2020, Cor. 13; any alpha > 1 is valid)."""

    def log_delta(alpha: float) -> float:
        return (alpha - 1) * (alpha * rho - epsilon) + (alpha - 1) * math.log1p(-1 / alpha) - math.log(alpha)

    guess = max(1 + epsilon / (2 * rho), 1.5)
    result = optimize.minimize_scalar(log_delta, bounds=(1 + 1e-9, 4 * guess + 4), method="bounded")
    candidates = [log_delta(guess)] + ([float(result.fun)] if result.success else [])
    best = min(candidates)
    if best >= 0:  # no delta < 1 at these alphas (e^best overflowed from epsilon ~2^33 on in dimension > 1)
        return 1.0
    return min(1.0, math.exp(best) * _UP)


# ---------------------------------------------------------------------------------------------
# The mechanism
# ---------------------------------------------------------------------------------------------


class Gaussian(NumericMechanism):
    """(epsilon, delta)-DP release of a real (or real vector) query of L2 sensitivity ``sensitivity``.

    Releases ``snap(value) + 2^k * Z`` with Z ~ N_Z(0, (sigma / 2^k)^2) per coordinate: the discrete
    Gaussian on the public grid 2^k (Canonne, Kamath & Steinke 2020). Its privacy loss is at most that
    of the continuous Gaussian with the same sigma in the zCDP sense; the (epsilon, delta) claim is
    proved for the discrete law itself (module docstring). Guarantee: ``ApproxDP(epsilon, delta)``.

    Parameters
    ----------
    sensitivity: L2 sensitivity Delta (> 0, finite).
    epsilon: > 0 (< 1 for ``calibration="classic"``; warns above 5).
    delta: 0 < delta < 1.
    calibration: ``"analytic"`` (Balle & Wang 2018, default) or ``"classic"`` (Dwork & Roth, epsilon < 1).
    dimension: number of coordinates released (at most 2**40).

    The effective sensitivity Delta + sqrt(d) 2^k is at most (1 + 2^-20) Delta for every accepted
    epsilon and delta (module docstring).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> mechanism = Gaussian(1.0, 1.0, 1e-5)
    >>> round(mechanism.sigma, 3), mechanism.guarantee.delta
    (3.731, 1e-05)
    >>> noisy = mechanism.release([10.0], rng=InsecureSeededRandom(0))
    >>> bool(abs(noisy[0] - 10.0) < 25)
    True
    >>> round(mechanism.confidence_interval(0.05)[1], 2)
    7.31
    """

    def __init__(
        self,
        sensitivity: float,
        epsilon: float,
        delta: float,
        calibration: str = "analytic",
        dimension: int = 1,
    ) -> None:
        self.sensitivity = check_positive("sensitivity", sensitivity)
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta, allow_zero=False)
        if self.delta < sys.float_info.min:  # a subnormal delta: its log-space calibration loses every digit
            raise InvalidParameterError("delta", delta, f"must be at least {sys.float_info.min:g} (a normal float)")
        if calibration not in _CALIBRATIONS:
            raise InvalidParameterError("calibration", calibration, "must be 'analytic' or 'classic'")
        self.calibration = calibration
        self.dimension = check_dimension(dimension)
        if calibration == "classic" and self.epsilon >= 1:
            raise InvalidParameterError(
                "epsilon",
                epsilon,
                "must be < 1 for calibration='classic' (the classic theorem holds for "
                "epsilon < 1); use calibration='analytic'",
            )
        check_noise_range(self.sensitivity, self.epsilon, largest_epsilon=_LARGEST_EPSILON)  # e^epsilon s in log_ndtr
        warn_if_risky(self.epsilon, delta=self.delta)
        try:
            nominal = (
                analytic_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)
                if calibration == "analytic"
                else classic_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)
            )
        except OverflowError:  # sigma beyond the float range
            nominal = math.inf
        if not nominal < MAX_RELEASE_SCALE:
            raise self._too_much_noise(epsilon, f"{nominal:.4g}")
        # The grid comes from public parameters only: 2^-20 of the share Delta / sqrt(d), coarsened
        # with the noise by at most 10 bits (module docstring); the discrete Gaussian sampler takes
        # any sigma in grid units.
        exponent = capped_grid_exponent(self.sensitivity, nominal, self.dimension, norm=2)
        shift_units = self._units_for(self.sensitivity, exponent)
        try:
            sigma_units = self._calibrate_units(shift_units)
        except OverflowError:  # pragma: no cover - sigma / Delta is below ~2^70 for every accepted input
            sigma_units = math.inf
        if (
            not math.isfinite(sigma_units)
            or math.frexp(sigma_units)[1] - 1 + exponent >= math.frexp(MAX_RELEASE_SCALE)[1] - 1
        ):
            raise self._too_much_noise(epsilon, f"{sigma_units:.4g} x 2**{exponent}")  # at least 2^1007
        self.grid_exponent = exponent
        self._shift_units = shift_units
        self.effective_sensitivity = math.ldexp(shift_units, exponent)
        self._sigma_units = sigma_units
        self.sigma = math.ldexp(sigma_units, exponent)  # exact power-of-two rescaling

    def _too_much_noise(self, epsilon: float, sigma: str) -> InvalidParameterError:
        return InvalidParameterError(
            "epsilon",
            epsilon,
            f"with delta {self.delta:g} and sensitivity {self.sensitivity!r} needs noise sigma {sigma}: it "
            f"must stay below 2**1007 ({MAX_RELEASE_SCALE:.4g}) for the releases to stay within float64 (raise "
            "epsilon or delta)",
        )

    # -- calibration -----------------------------------------------------------------------------

    def _units_for(self, distance: float, exponent: int | None = None) -> float:
        """Most L2 distance, in grid units (of the grid 2^exponent, by default the mechanism's), between
        snapped values whose raw values are ``distance`` apart."""
        raw = math.ldexp(distance, -(self.grid_exponent if exponent is None else exponent))
        if self.dimension == 1:
            return float(math.floor(raw) + 1)  # an integer shift: |rint(x) - rint(y)| <= floor(|x - y|) + 1
        return round_up(raw + math.sqrt(self.dimension))  # ||a + 1|| <= ||a|| + sqrt(d)

    def _delta_at(self, sigma_units: float, shift_units: float) -> float:
        """Rigorous delta(epsilon) of the released law at this sigma and sensitivity (grid units)."""
        if self.dimension == 1:
            return discrete_gaussian_delta_upper(sigma_units, int(shift_units), self.epsilon)
        rho = round_up(shift_units**2 / (2 * sigma_units**2))
        return _zcdp_delta(rho, self.epsilon)

    def _calibrate_units(self, shift_units: float) -> float:
        """Smallest sigma (grid units) whose rigorous delta at this sensitivity (grid units) meets the
        target, never below the formula's."""
        # The formula's sigma for the effective sensitivity (grid units) is the natural start.
        formula = analytic_gaussian_sigma if self.calibration == "analytic" else classic_gaussian_sigma
        start = formula(self.epsilon, self.delta, shift_units)
        accept = lambda s: self._delta_at(s, shift_units) <= self.delta  # noqa: E731
        high = start
        while not accept(high):
            high = round_up(high * 1.01)
        if self.calibration == "classic":
            return high  # the classic formula, raised only if the discrete check asked for it
        low = high / 1.02
        if accept(low):  # pragma: no cover - the discrete law never needs less than the continuous one by 2%
            return high
        for _ in range(80):
            middle = (low + high) / 2
            if middle in (low, high):
                break
            if accept(middle):
                high = middle
            else:
                low = middle
        return high

    @classmethod
    def from_accuracy(
        cls,
        sensitivity: float,
        accuracy: float,
        alpha: float,
        delta: float,
        calibration: str = "analytic",
        dimension: int = 1,
    ) -> Gaussian:
        """The Gaussian mechanism with (nearly) the smallest epsilon whose (1 - alpha) noise interval
        is within ``accuracy``.

        epsilon is found by bisection (to a relative 1e-9) on ``noise_quantile(alpha) <= accuracy``.

        >>> mechanism = Gaussian.from_accuracy(1.0, accuracy=10.0, alpha=0.05, delta=1e-6)
        >>> mechanism.noise_quantile(0.05) <= 10.0, round(mechanism.epsilon, 3)
        (True, 0.816)
        """
        sens = check_positive("sensitivity", sensitivity)
        target = check_positive("accuracy", accuracy)
        level = check_alpha(alpha)
        check_delta(delta, allow_zero=False)

        def meets(epsilon: float) -> bool:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrivacyWarning)
                return cls(sens, epsilon, delta, calibration, dimension).noise_quantile(level) <= target

        high = 0.99999 if calibration == "classic" else 1.0
        if calibration == "classic" and not meets(high):
            raise InvalidParameterError(
                "accuracy",
                accuracy,
                "is not reachable with the classic calibration (it needs epsilon >= 1); use calibration='analytic'",
            )
        while not meets(high):
            high *= 2
            if high > 1e6:
                raise InvalidParameterError("accuracy", accuracy, "is too small for any reasonable epsilon")
        low = high / 2
        while meets(low):
            low /= 2
            if low < 1e-12:
                # delta alone forces sigma >= ~Delta / (2 sqrt(2 pi) delta) as epsilon -> 0, so a
                # wide enough accuracy holds at every epsilon: there is no smallest one.
                raise InvalidParameterError(
                    "accuracy", accuracy, "is met even at epsilon < 1e-12 (delta alone forces that much noise)"
                )
        while high / low > 1 + 1e-9:
            middle = math.sqrt(low * high)
            if meets(middle):
                high = middle
            else:
                low = middle
        return cls(sens, high, delta, calibration, dimension)

    # -- privacy ---------------------------------------------------------------------------------

    @property
    def guarantee(self) -> ApproxDP:
        """``ApproxDP(epsilon, delta)`` for inputs at L2 distance ``sensitivity``."""
        return ApproxDP(self.epsilon, self.delta)

    @property
    def rho(self) -> float:
        """zCDP parameter Delta_eff^2 / (2 sigma^2) (CKS 2020, Thm 14), with the grid's effective sensitivity."""
        return round_up(self._shift_units**2 / (2 * self._sigma_units**2))

    @property
    def event(self) -> PrivacyEvent:
        """Gaussian event with noise multiplier sigma / Delta_eff (the grid's effective sensitivity), rounded down."""
        return GaussianEvent(noise_multiplier=_round_down(self._sigma_units / self._shift_units))

    def privacy_map(self, d_in: float) -> ApproxDP:
        """(epsilon, delta') for inputs at L2 distance ``d_in``: the same epsilon, delta' recomputed for the
        released law at that distance (rigorous bound; equals the guarantee at d_in = sensitivity)."""
        distance = check_positive("d_in", d_in)
        if distance == self.sensitivity:
            return self.guarantee
        new_delta = round_up(self._delta_at(self._sigma_units, self._units_for(distance)))
        if distance < self.sensitivity:
            new_delta = min(new_delta, self.delta)
        if new_delta >= 1:
            raise InvalidParameterError("d_in", d_in, "is so large that no delta < 1 holds at this epsilon")
        return ApproxDP(self.epsilon, new_delta)

    # -- release ---------------------------------------------------------------------------------

    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """``value`` plus discrete Gaussian noise on the grid 2^k; same shape as ``value``."""
        values, scalar = check_release_value(value, self.dimension)
        # Refuses an overflowing value before any noise is drawn.
        snapped = snap_to_grid(values, self.grid_exponent, noise_scale=self._sigma_units)
        source = resolve_source(rng)
        noise = discrete_gaussian(self._sigma_units, values.size, rng=source)
        noisy = add_noise_on_grid(snapped, noise, self.grid_exponent)
        return shape_like(noisy, scalar, value)

    def _release_repeated(self, value: Any, count: int, source: RandomSource) -> NDArray[Any]:
        values, scalar = check_release_value(value, self.dimension)
        snapped = snap_to_grid(values, self.grid_exponent, noise_scale=self._sigma_units)
        noise = discrete_gaussian(self._sigma_units, values.size * count, rng=source).reshape(count, values.size)
        noisy = add_noise_on_grid(snapped[None, :], noise, self.grid_exponent)
        return stack_like(noisy, scalar, value)

    # -- accuracy --------------------------------------------------------------------------------

    def _smallest_units_with_tail(self, level: float) -> int:
        """Smallest integer m >= 0 with (rigorously) P(|Z| >= m) <= level."""
        s = self._sigma_units

        def fits(m: int) -> bool:
            return 2 * _tail_bounds(m, s)[1] <= level

        # -Phi^{-1}(level / 2), not Phi^{-1}(1 - level / 2): 1 - level / 2 rounds to 1 (an infinite
        # quantile) below level ~1e-16 and loses digits well before. The search gallops from the
        # guess either way, so a wrong guess costs O(log) steps, not O(error). m = 0 never fits:
        # P(|Z| >= 0) = 1 > level.
        guess = max(1, math.floor(-s * float(special.ndtri(max(level / 2, 5e-324)))))
        return first_true(fits, guess, lowest=1)

    def noise_quantile(self, alpha: float) -> float:
        """Half-width h with P(|noise| <= h) >= 1 - alpha for the discrete Gaussian on the grid.

        About sigma Phi^{-1}(1 - alpha/2) plus one grid step; computed from a rigorous tail bound.
        """
        level = check_alpha(alpha)
        # P(|Z| > m - 1) = P(|Z| >= m) <= alpha, so m - 1 is a valid half-width (rounded up to a float
        # where it passes 2^53, never down).
        return math.ldexp(float_up(self._smallest_units_with_tail(level) - 1), self.grid_exponent)

    @property
    def expected_error(self) -> float:
        """E|noise| per coordinate: 2 (s^2 - 1/12) / (s sqrt(2 pi)) grid units for s = sigma / 2^k
        (Euler-Maclaurin; about sigma sqrt(2/pi), accurate to O(s^-3) relative)."""
        s = self._sigma_units
        if s < 4:
            # Euler-Maclaurin fails for small s (it went negative below s ~ 0.29, reachable from
            # epsilon ~2^39 on): sum the law directly, to |z| = 40 s + 2 (the rest is below e^-800).
            weights = [math.exp(-0.5 * (z / s) ** 2) for z in range(1, math.ceil(40 * s) + 3)]
            mean = 2 * sum(z * w for z, w in enumerate(weights, start=1)) / (1 + 2 * sum(weights))
            return math.ldexp(mean, self.grid_exponent)
        return math.ldexp(2 * (s * s - 1 / 12) / (s * math.sqrt(2 * math.pi)), self.grid_exponent)

    def linf_tail_bound(self, beta: float, dimension: int | None = None) -> float:
        """t with P(||Y||_inf >= t) <= beta for K coordinates: union bound with the (discrete) Gaussian tail.

        Seed 000 states sqrt(2 ln(1.25/delta)) ln(K/beta) Delta/epsilon; that form does not hold for
        every (K, beta) (for K = 1, beta = 0.9 the tail at 0.105 sigma is 0.92), so dpkit returns the
        union bound: the smallest grid multiple t with K * P(|Z| >= t) <= beta.
        """
        level = check_alpha(beta)
        k = self.dimension if dimension is None else check_integer("dimension", dimension, minimum=1)
        return math.ldexp(float_up(self._smallest_units_with_tail(level / k)), self.grid_exponent)

    def __repr__(self) -> str:
        return (
            f"Gaussian(sensitivity={self.sensitivity!r}, epsilon={self.epsilon!r}, delta={self.delta!r}, "
            f"calibration={self.calibration!r}, dimension={self.dimension}, sigma={self.sigma!r})"
        )
