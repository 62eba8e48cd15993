"""The discrete Gaussian mechanism (Canonne, Kamath & Steinke 2020, "The discrete Gaussian for
differential privacy", NeurIPS).

Integer noise X ~ N_Z(0, sigma^2), P(X = x) proportional to exp(-x^2 / (2 sigma^2)) on the
integers, added to an integer query. What CKS prove and this module uses:

- zCDP (CKS Thm. 4 and Thm. 14): for a query of L2 sensitivity Delta (independent noise per
  coordinate), the release is (Delta^2 / (2 sigma^2))-zCDP, exactly as the continuous Gaussian.
- Exact (epsilon, delta) for one dimension (CKS Thm. 7): with integer Delta,
  delta = P[X > eps sigma^2 / Delta - Delta / 2] - e^eps P[X > eps sigma^2 / Delta + Delta / 2],
  the tight value (it equals sum_z max(0, p(z) - e^eps p(z - Delta))). Built from
  ``epsilon``/``delta``, the mechanism calibrates sigma so that this delta is at most the target.
- Variance at most sigma^2 and sigma^2-subgaussian tails (CKS Cor. 9 and Prop. 16).

Tail sums are computed in float64 by summing exp(-x^2 / (2 sigma^2)) from the far tail inward
(the normalizer likewise), then given a relative safety margin; terms beyond 40 sigma are below
e^-800 and dropped (the target delta is at least 1e-200). Above sigma = 1e5 (the grid noise of
real-valued sums in ``dpkit.engine`` is there) accuracy uses a rigorous upper bound on the tail
within a relative 1e-7 of the exact one (``_large_sigma_tail``), so half-widths are those of the
continuous Gaussian. The noise itself is exact (:func:`dpkit.noise.discrete_gaussian`) at every
sigma below :data:`dpkit.noise.MAX_RELEASE_SCALE` (2^1007, where intervals and quantiles stay within
float64); releases are int64 while they fit, Python integers (object arrays) beyond.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InternalError, InvalidParameterError
from dpkit._search import first_true
from dpkit._validation import as_fraction, check_delta, check_epsilon, check_positive, warn_if_risky
from dpkit.events import DiscreteGaussianEvent
from dpkit.guarantees import ZCDP, ApproxDP, Guarantee, round_up
from dpkit.mechanisms._base import check_integer_values
from dpkit.mechanisms.geometric import IntegerNoiseMechanism, check_integer_sensitivity, int64_if_fits
from dpkit.noise import MAX_RELEASE_SCALE, MAX_SCALE, RandomSource, discrete_gaussian, resolve_source

__all__ = ["DiscreteGaussian", "discrete_gaussian_delta"]

#: Largest sigma for which sums over the pmf are computed term by term (40 sigma terms).
_MAX_SUMMED_SIGMA = 1e5
#: Smallest target delta accepted in (epsilon, delta) mode (float tail sums underflow below).
_MIN_DELTA = 1e-200
# Relative safety margin on float tail sums (their error is ~1e-13 relative at most).
_SUM_MARGIN = 1e-9


def _half_square_over(x: NDArray[np.float64], sigma: float) -> NDArray[np.float64]:
    """x^2 / (2 sigma^2); where 2 sigma^2 leaves the float range (sigma below ~1e-154: 0, so that x = 0
    would give 0 / 0; above ~1e154: inf, so that a huge x would give inf / inf) as (x / sigma)^2 / 2."""
    denominator = 2.0 * sigma * sigma
    with np.errstate(over="ignore"):  # an infinite exponent is a weight of 0, as it should be
        if 0 < denominator < math.inf:
            return (x * x) / denominator  # type: ignore[no-any-return]
        return np.square(x / sigma) / 2.0  # type: ignore[no-any-return]


class _HalfWeights:
    """Unnormalized weights w(x) = exp(-x^2 / (2 sigma^2)), x = 0..L, with tail sums from the top."""

    def __init__(self, sigma: float, reach: int = 0) -> None:
        if sigma > _MAX_SUMMED_SIGMA:
            raise InternalError(f"sigma {sigma} too large for term-by-term sums")
        self.limit = int(math.ceil(40 * sigma)) + reach + 2
        x = np.arange(self.limit + 1, dtype=np.float64)
        weights = np.exp(-_half_square_over(x, sigma))
        # tails[k] = sum_{x >= k} w(x), summed from the smallest terms up.
        self.tails = np.cumsum(weights[::-1])[::-1]
        self.total = 2.0 * float(self.tails[0]) - 1.0  # sum over all integers

    def at_least(self, k: int) -> float:
        """sum_{x >= k} w(x) over all integers x (k may be negative)."""
        if k > self.limit:
            return 0.0
        if k >= 0:
            return float(self.tails[k])
        if 1 - k > self.limit:
            return self.total
        return self.total - float(self.tails[1 - k])

    def probability_at_least(self, k: int) -> float:
        return self.at_least(k) / self.total


def _large_sigma_tail(sigma: float, h: int) -> float:
    """An upper bound on P(|X| > h), X ~ N_Z(0, sigma^2), tight for large sigma (no term-by-term sum).

    With f(x) = exp(-x^2 / (2 sigma^2)) and m = h + 1 >= 1, Euler-Maclaurin to second order gives
    sum_{x >= m} f(x) = integral_m^inf f + f(m) / 2 - f'(m) / 12 + R with |R| <= (1/12) integral_m^inf |f''|
    (the periodic Bernoulli polynomial B2({x}) / 2 lies in [-1/24, 1/12]). f'' < 0 on [0, sigma) and
    > 0 beyond, so integral_m^inf |f''| = -f'(m) = (m / sigma^2) f(m) for m >= sigma, and
    2 e^{-1/2} / sigma + f'(m) for m < sigma. By Poisson summation the normaliser
    sum_x f(x) = sqrt(2 pi) sigma (1 + 2 sum_k exp(-2 pi^2 sigma^2 k^2)) is at least sqrt(2 pi) sigma.
    Writing t = m / sigma and phi the standard normal density, that is
    P(X >= m) <= Q(t) + phi(t) / (2 sigma) + (t phi(t) if t >= 1 else phi(1)) / (6 sigma^2),
    above the exact tail by at most (t phi(t) or 2 phi(1)) / (3 sigma^2), a relative (t^2 + 2) / (3 sigma^2)
    (below 1e-7 for sigma > 1e5 and t <= 40), plus the 1e-9 float margin.
    The subgaussian bound 2 exp(-m^2 / (2 sigma^2)) (CKS Prop. 16) also holds; the smaller is kept.
    """
    m = h + 1
    t = m / sigma
    density = math.exp(-t * t / 2.0) / math.sqrt(2.0 * math.pi)
    curvature = t * density if t >= 1 else math.exp(-0.5) / math.sqrt(2.0 * math.pi)
    one_sided = 0.5 * math.erfc(t / math.sqrt(2.0)) + density / (2.0 * sigma) + curvature / (6.0 * sigma * sigma)
    return min(1.0, 2.0 * one_sided * (1 + _SUM_MARGIN), 2.0 * math.exp(-t * t / 2.0))


def discrete_gaussian_delta(sigma: float, epsilon: float | Fraction, sensitivity: int) -> float:
    """delta(epsilon) of x + N_Z(0, sigma^2) for integer x moving by ``sensitivity`` (CKS 2020, Thm. 7).

    delta = P[X > eps sigma^2/Delta - Delta/2] - e^eps P[X > eps sigma^2/Delta + Delta/2]; the
    thresholds' integer parts are computed exactly with fractions. The float value is accurate to
    about 1e-12 relative; callers add a margin.

    >>> round(discrete_gaussian_delta(3.0, 1.0, 1), 8)
    0.00021778
    """
    sig = check_positive("sigma", sigma)
    eps = as_fraction(epsilon) if not isinstance(epsilon, Fraction) else epsilon
    delta_int = check_integer_sensitivity(sensitivity)
    weights = _HalfWeights(sig, reach=delta_int)
    centre = eps * Fraction(sig) ** 2 / delta_int
    # X > a  <=>  X >= floor(a) + 1 for integer X.
    first = math.floor(centre - Fraction(delta_int, 2)) + 1
    second = math.floor(centre + Fraction(delta_int, 2)) + 1
    upper = weights.probability_at_least(second)
    # e^eps P[X >= second] in log space: e^eps alone overflows for epsilon above ~709.
    log_term = float(eps) + math.log(upper) if upper > 0 else -math.inf
    value = weights.probability_at_least(first) - (math.exp(log_term) if log_term < 700 else math.inf)
    return max(0.0, value)


def _calibrate_sigma(epsilon: Fraction, delta: float, sensitivity: int) -> float:
    """The smallest sigma (to ~1e-9 relative) whose exact delta(epsilon), with margin, is <= ``delta``."""

    def ok(sigma: float) -> bool:
        return discrete_gaussian_delta(sigma, epsilon, sensitivity) * (1 + _SUM_MARGIN) + 1e-300 <= delta

    eps = float(epsilon)
    # Start from the classical bound and bracket by doubling / halving.
    guess = sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / eps
    high = min(max(guess, 1e-3), _MAX_SUMMED_SIGMA)  # a tiny epsilon gives an infinite guess
    while not ok(high):
        high *= 2
        if high > _MAX_SUMMED_SIGMA:
            raise InvalidParameterError(
                "epsilon",
                float(epsilon),
                f"with delta={delta} needs sigma > {_MAX_SUMMED_SIGMA:g}; build the mechanism from sigma= or rho=",
            )
    low = high / 2
    while ok(low) and low > 1e-6:
        high, low = low, low / 2
    while high / low - 1 > 1e-9:
        middle = math.sqrt(low * high)
        if ok(middle):
            high = middle
        else:
            low = middle
    return high


class DiscreteGaussian(IntegerNoiseMechanism):
    """Add discrete Gaussian noise N_Z(0, sigma^2) to an integer query (Canonne, Kamath & Steinke 2020).

    Build it from exactly one of:

    - ``sigma``: guarantee ``ZCDP(Delta^2 / (2 sigma^2))`` (CKS Thm. 14, any dimension);
    - ``rho``: sigma = Delta / sqrt(2 rho) rounded up; guarantee ``ZCDP(rho)``;
    - ``epsilon`` and ``delta``: sigma calibrated with the exact one-dimensional formula of CKS
      Thm. 7; guarantee ``ApproxDP(epsilon, delta)``. This mode needs an integer sensitivity and
      releases one integer at a time (the formula is for one dimension).

    ``sensitivity`` is the L2 sensitivity Delta (> 0) of the integer query. ``rho`` always
    reports the zCDP the mechanism satisfies, Delta^2 / (2 sigma^2).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> mechanism = DiscreteGaussian(sensitivity=1, sigma=2.0)
    >>> mechanism.guarantee.rho
    0.125
    >>> mechanism.release([10, 20, 30], rng=InsecureSeededRandom(4)).tolist()
    [10, 18, 30]
    >>> calibrated = DiscreteGaussian(sensitivity=1, epsilon=1.0, delta=1e-6)
    >>> round(calibrated.sigma, 3), calibrated.guarantee.delta
    (4.231, 1e-06)
    """

    def __init__(
        self,
        sensitivity: float,
        sigma: float | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
    ) -> None:
        modes = [sigma is not None, rho is not None, epsilon is not None or delta is not None]
        if sum(modes) != 1:
            raise InvalidParameterError(
                "sigma", sigma, "give exactly one of sigma, rho, or epsilon together with delta"
            )
        self._sensitivity = check_positive("sensitivity", sensitivity)
        self._sensitivity_exact = as_fraction(self._sensitivity)
        self._epsilon: float | None = None
        self._delta: float | None = None
        if sigma is not None:
            self._sigma = check_positive("sigma", sigma)
            self._claimed_rho = self._sensitivity_exact**2 / (2 * Fraction(self._sigma) ** 2)
            if self._claimed_rho > Fraction(sys.float_info.max):
                raise InvalidParameterError(
                    "sigma",
                    sigma,
                    f"gives rho = sensitivity^2 / (2 sigma^2) above the largest float (sensitivity {sensitivity})",
                )
        elif rho is not None:
            rho_value = check_positive("rho", rho)
            self._claimed_rho = as_fraction(rho_value)
            self._sigma = self._sigma_for_rho(self._claimed_rho)
            warn_if_risky(math.sqrt(2 * rho_value))
        else:
            if epsilon is None or delta is None:
                raise InvalidParameterError(
                    "delta" if delta is None else "epsilon", None, "epsilon and delta must be given together"
                )
            self._epsilon = check_epsilon(epsilon)
            self._delta = check_delta(delta, allow_zero=False)
            if self._delta < _MIN_DELTA:
                raise InvalidParameterError("delta", delta, f"must be at least {_MIN_DELTA:g} here")
            integer_sensitivity = check_integer_sensitivity(sensitivity)
            warn_if_risky(self._epsilon, delta=self._delta)
            self._sigma = _calibrate_sigma(as_fraction(self._epsilon), self._delta, integer_sensitivity)
            self._claimed_rho = self._sensitivity_exact**2 / (2 * Fraction(self._sigma) ** 2)
        if not self._sigma < MAX_RELEASE_SCALE:
            limit = f"2**1007 ({MAX_RELEASE_SCALE:.4g}) for intervals and quantiles to stay within float64"
            if rho is not None:
                raise InvalidParameterError("rho", rho, f"gives sigma {self._sigma:g}: it must stay below {limit}")
            raise InvalidParameterError("sigma", sigma, f"must be below {limit}")
        self._cache: dict[str, Any] = {}

    def _sigma_for_rho(self, rho: Fraction) -> float:
        """The smallest float sigma with sigma^2 >= Delta^2 / (2 rho) (checked exactly); inf beyond the
        float range (a subnormal rho), for the caller's limit check to refuse."""
        target = self._sensitivity_exact**2 / (2 * rho)
        # sqrt(target) to a few ulps, with the exponent split off (target itself can leave the float range).
        shift = (target.numerator.bit_length() - target.denominator.bit_length()) // 2
        scaled = target / Fraction(4) ** shift  # in [1/16, 16]
        try:
            sigma = math.ldexp(math.sqrt(float(scaled)), shift)
        except OverflowError:
            return math.inf
        while sigma > 0 and Fraction(math.nextafter(sigma, 0.0)) ** 2 >= target:
            sigma = math.nextafter(sigma, 0.0)
        while Fraction(sigma) ** 2 < target:
            sigma = math.nextafter(sigma, math.inf)
        return sigma

    # -- parameters --------------------------------------------------------------------------

    @property
    def sensitivity(self) -> float:
        return self._sensitivity

    @property
    def sigma(self) -> float:
        return self._sigma

    @property
    def rho(self) -> float:
        """The zCDP parameter the mechanism satisfies for its sensitivity: Delta^2 / (2 sigma^2) (or the rho asked)."""
        return float(self._claimed_rho)

    @property
    def epsilon(self) -> float | None:
        return self._epsilon

    @property
    def delta(self) -> float | None:
        return self._delta

    # -- privacy -----------------------------------------------------------------------------

    @property
    def guarantee(self) -> Guarantee:
        if self._epsilon is not None and self._delta is not None:
            return ApproxDP(self._epsilon, self._delta)
        return ZCDP(self._claimed_rho)  # type: ignore[arg-type]

    def privacy_map(self, d_in: float) -> Guarantee:
        """zCDP rho (d_in / Delta)^2; in (epsilon, delta) mode, the exact delta of CKS Thm. 7 for shifts <= d_in."""
        distance = check_positive("d_in", d_in)
        if self._epsilon is None or self._delta is None:
            return ZCDP(self._claimed_rho * as_fraction(distance) ** 2 / self._sensitivity_exact**2)  # type: ignore[arg-type]
        if distance == self._sensitivity:
            return self.guarantee
        shifts = range(1, math.floor(distance) + 1)
        if not shifts:
            # Integer queries at distance < 1 are equal: nothing is revealed; keep the guarantee.
            return self.guarantee
        worst = max(discrete_gaussian_delta(self._sigma, as_fraction(self._epsilon), s) for s in shifts)
        worst = round_up(worst * (1 + _SUM_MARGIN) + 1e-300)
        if worst <= self._delta:
            return self.guarantee
        if worst >= 1:
            raise InvalidParameterError("d_in", d_in, "is so large that delta reaches 1 at this epsilon")
        return ApproxDP(self._epsilon, worst)

    @property
    def event(self) -> DiscreteGaussianEvent:
        return DiscreteGaussianEvent(self._sigma, self._sensitivity)

    # -- release -----------------------------------------------------------------------------

    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """x + X for an integer (or, outside (epsilon, delta) mode, an array of integers) x: an int for a
        scalar, an int64 array otherwise (below sigma 2^40 the sum is int64 as before; beyond, it is
        taken in Python integers and is an object array when a value leaves the int64 range)."""
        array = check_integer_values("value", value)
        if self._epsilon is not None and array.size > 1:
            raise InvalidParameterError(
                "value", value, "must be one integer: the (epsilon, delta) calibration is for one dimension"
            )
        source = resolve_source(rng)
        noise = discrete_gaussian(self._sigma, array.size, rng=source).reshape(array.shape)
        noisy = (
            array + noise
            if self._sigma <= MAX_SCALE
            else int64_if_fits(np.asarray(array.astype(object) + noise.astype(object), dtype=object))
        )
        return int(noisy.reshape(-1)[0]) if array.ndim == 0 else noisy

    def _release_repeated(self, value: Any, count: int, source: RandomSource) -> NDArray[Any]:
        array = check_integer_values("value", value)
        if array.ndim != 0:
            return np.stack([np.asarray(self.release(array, rng=source)) for _ in range(count)])
        noise = discrete_gaussian(self._sigma, count, rng=source)
        return (
            int(array) + noise
            if self._sigma <= MAX_SCALE
            else int64_if_fits(np.asarray(int(array) + noise.astype(object), dtype=object))
        )

    # -- accuracy ----------------------------------------------------------------------------

    def _weights(self) -> _HalfWeights | None:
        if self._sigma > _MAX_SUMMED_SIGMA:
            return None
        if "weights" not in self._cache:
            self._cache["weights"] = _HalfWeights(self._sigma)
        return self._cache["weights"]  # type: ignore[no-any-return]

    def pmf(self, z: Any) -> NDArray[np.float64]:
        """P(X = z) for integers z (floats; for analysis and tests)."""
        values = np.asarray(z, dtype=np.float64)
        weights = self._weights()
        total = weights.total if weights is not None else self._sigma * math.sqrt(2 * math.pi)
        return np.exp(-_half_square_over(values, self._sigma)) / total

    def tail_probability(self, h: int) -> float:
        """P(|X| > h) for an integer h >= 0.

        Exact sum; for huge sigma (> 1e5) a rigorous upper bound within a relative 1e-7 of it
        (:func:`_large_sigma_tail`).
        """
        weights = self._weights()
        if weights is None:
            return _large_sigma_tail(self._sigma, h)
        return 2.0 * weights.probability_at_least(h + 1)

    def _quantile_units(self, level: float) -> int:
        """The smallest integer h >= 0 with P(|X| > h) (1 + 1e-9) <= level (the tail as in :meth:`tail_probability`:
        the exact pmf, or for huge sigma a rigorous upper bound, so h may exceed the exact one by a
        relative 1e-7 at most)."""
        # sigma^2-subgaussian (CKS): P(|X| > h) <= 2 exp(-(h+1)^2 / (2 sigma^2)) gives an upper start.
        start = max(0, math.ceil(self._sigma * math.sqrt(2 * math.log(2 / level))) - 1)
        # The tail is an exact sum, or for huge sigma one upper bound: monotone in h either way.
        return first_true(lambda h: self.tail_probability(h) * (1 + _SUM_MARGIN) <= level, start)

    @property
    def expected_error(self) -> float:
        """E|X| = 2 sum_{x >= 1} x p(x) (Euler-Maclaurin 2(sigma^2 - 1/12)/(sigma sqrt(2 pi)) for huge sigma)."""
        weights = self._weights()
        if weights is None:
            if self._sigma > 1e150:  # sigma^2 would overflow; the 1/12 is far below sigma's last digit
                return 2 * self._sigma / math.sqrt(2 * math.pi)
            return 2 * (self._sigma**2 - 1 / 12) / (self._sigma * math.sqrt(2 * math.pi))
        x = np.arange(1, weights.limit + 1, dtype=np.float64)
        return float(2 * np.sum((x * np.exp(-_half_square_over(x, self._sigma)))[::-1]) / weights.total)

    @property
    def variance(self) -> float:
        """Var X = 2 sum_{x >= 1} x^2 p(x) <= sigma^2 (CKS Cor. 9); sigma^2 for huge sigma (inf beyond the
        float range, sigma above ~1.3e154)."""
        weights = self._weights()
        if weights is None:
            return self._sigma * self._sigma  # a float product overflows to inf, never raises
        x = np.arange(1, weights.limit + 1, dtype=np.float64)
        return float(2 * np.sum((x * x * np.exp(-_half_square_over(x, self._sigma)))[::-1]) / weights.total)

    def __repr__(self) -> str:
        if self._epsilon is not None:
            return (
                f"DiscreteGaussian(sensitivity={self._sensitivity}, epsilon={self._epsilon}, "
                f"delta={self._delta})  # sigma={self._sigma}"
            )
        return f"DiscreteGaussian(sensitivity={self._sensitivity}, sigma={self._sigma})"
