"""Rényi differential privacy: the moments accountant.

Rényi DP (Mironov 2017, "Rényi Differential Privacy", CSF) describes a mechanism by its curve
alpha -> epsilon(alpha), a bound on the Rényi divergence D_alpha between its output distributions on
neighbouring datasets, for every order alpha > 1. Curves add under composition (Mironov 2017,
Prop. 1), which is what makes the moments accountant of Abadi et al. 2016 ("Deep Learning with
Differential Privacy", CCS) work: the curve of DP-SGD is ``steps`` times the curve of one
Poisson-sampled Gaussian step. The curve is converted to (epsilon, delta) at the end, minimising
over the tracked orders.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._lazy import LazyModule
from dpkit.accounting._base import PrivacyAccountant, grouped_event, inverse_square
from dpkit.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    GroupEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    PureDPEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
    ZCDPEvent,
)
from dpkit.guarantees import NeighbourRelation

special = LazyModule("scipy.special")
mpmath = LazyModule("mpmath")

__all__ = ["RDPAccountant"]

FloatArray = NDArray[np.float64]

#: The orders dp_accounting tracks by default: dense near 1 (where large-noise, many-step
#: workloads have their optimum) and sparse up to 1024 (small-noise, few-step workloads).
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + [float(x) for x in range(11, 64)] + [128.0, 256.0, 512.0, 1024.0]
)

# Relative and absolute slack added to every answer to cover floating-point error in the curves
# and the conversion (a few hundred ulps at most); the answer is then a certified upper bound.
_RELATIVE_SLACK = 1e-9
_ABSOLUTE_SLACK = 1e-12


def _check_orders(orders: Iterable[Any] | None) -> FloatArray:
    if orders is None:
        return np.array(DEFAULT_ORDERS, dtype=np.float64)
    allowed = "must be a non-empty sequence of finite real numbers > 1"
    try:
        values = list(orders)
    except TypeError as exc:
        raise InvalidParameterError("orders", orders, allowed) from exc
    if not values:
        raise InvalidParameterError("orders", orders, allowed)
    for value in values:
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
            raise InvalidParameterError("orders", orders, allowed)
        if not math.isfinite(float(value)) or float(value) <= 1:
            raise InvalidParameterError("orders", orders, allowed)
    return np.unique(np.array(values, dtype=np.float64))


# -- Rényi divergence curves of single mechanisms -----------------------------------------------


def gaussian_rdp(noise_multiplier: float, orders: FloatArray) -> FloatArray:
    """D_alpha(N(0, s^2) || N(1, s^2)) = alpha / (2 s^2) (Mironov 2017, Prop. 7)."""
    return orders * (0.5 * inverse_square(noise_multiplier))


# Relative allowance added to the Laplace and randomized-response curves: they are evaluated to
# within a few dozen ulps (no cancellation, see below), and rounding up by this much makes each
# value an upper bound on the exact Rényi divergence rather than an estimate of it.
_CURVE_SLACK = 1e-13
# Below this a * epsilon the curves are evaluated in a cancellation-free, rescaled form; above
# it, e^{alpha epsilon} could overflow and the logarithmic form (accurate there) is used.
_LOG_FORM_FROM = 700.0
# 1/n! for n = 0..24: the Taylor coefficients of the series below (truncated where the tail is
# below 1e-23 relative for |z| <= 1).
_INVERSE_FACTORIALS = np.array([1.0 / math.factorial(n) for n in range(25)])
_UNIT_ROUNDOFF = 2.0**-52


def _exp_remainder_scaled(y: FloatArray) -> FloatArray:
    """(e^y - 1 - y) / y^2, accurate to a few ulps for every real y up to ~709 (1/2 at y = 0).

    The Taylor series sum_{n >= 2} y^(n-2) / n! for |y| <= 1 (terms decrease by a factor 3 or
    more, so even for y < 0 the alternating sum is at least a third of its first term); the direct
    form for |y| > 1, where expm1(y) and y differ by a factor 1.7 or more.
    """
    small = np.abs(y) <= 1
    z = np.where(small, y, 0.0)
    series = np.full_like(y, _INVERSE_FACTORIALS[-1])
    for n in range(len(_INVERSE_FACTORIALS) - 2, 1, -1):
        series = series * z + _INVERSE_FACTORIALS[n]
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = (np.expm1(y) - y) / (y * y)
    result: FloatArray = np.where(small, series, direct)
    return result


def _power_remainder_scaled(alpha: FloatArray, y: FloatArray) -> FloatArray:
    """phi(y) / (alpha y)^2 with phi(y) = e^{alpha y} - 1 - alpha (e^y - 1) >= 0, for alpha > 1.

    phi is L^alpha - 1 - alpha (L - 1) at L = e^y: convex in L and tangent to 0 at L = 1, so for a
    likelihood ratio with E_Q[L] = 1, E_Q[L^alpha] - 1 = E_Q[phi(log L)] is a sum of non-negative
    terms. With z = alpha y, phi = sum_{n >= 2} (1 - alpha^{1-n}) z^n / n!,
    summed for |z| <= 1 (consecutive terms shrink by 2/3 or more). For |z| > 1 the direct form
    e^y expm1((alpha-1) y) - (alpha-1) expm1(y) loses at most ~2.3 bits (its two terms differ by a
    factor 1.27 or more there).
    """
    z = alpha * y
    small = np.abs(z) <= 1
    zs = np.where(small, z, 0.0)
    log_alpha = np.log(alpha)
    last = len(_INVERSE_FACTORIALS) - 1
    series = -np.expm1(-(last - 1) * log_alpha) * _INVERSE_FACTORIALS[last]
    for n in range(last - 1, 1, -1):
        series = series * zs - np.expm1(-(n - 1) * log_alpha) * _INVERSE_FACTORIALS[n]
    b = alpha - 1
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        direct = (np.exp(y) * np.expm1(b * y) - b * np.expm1(y)) / (z * z)
    result: FloatArray = np.where(small, series, direct)
    return result


def _round_up_curve(values: FloatArray) -> FloatArray:
    """Non-negative, and moved up by the curves' rounding allowance (one ulp more for subnormals)."""
    rounded: FloatArray = np.nextafter(np.maximum(values, 0.0) * (1 + _CURVE_SLACK), np.inf)
    return rounded


def laplace_rdp(noise_multiplier: float, orders: FloatArray) -> FloatArray:
    """Exact RDP of Laplace noise of scale b on sensitivity 1 (Mironov 2017, Prop. 6), rounded up.

    D_alpha = 1/(alpha-1) log( alpha/(2 alpha-1) e^{(alpha-1)/b} + (alpha-1)/(2 alpha-1) e^{-alpha/b} ).
    With eps = 1/b, w1 = alpha/(2 alpha-1), w2 = (alpha-1)/(2 alpha-1) and h(y) = e^y - 1 - y, the
    sum inside the logarithm is 1 + w1 h((alpha-1) eps) + w2 h(-alpha eps) (the linear terms
    cancel exactly: w1 (alpha-1) = w2 alpha), a sum of non-negative terms. The logarithm of that
    is about alpha (alpha-1) eps^2 / 2: the form eps + log1p(...)/(alpha-1) used before cancelled
    for a small eps, and came out below the exact divergence (0.6% low at b = 1e14, alpha = 2).
    Every value is >= 0 and at least the exact divergence.
    """
    eps = 1.0 / noise_multiplier
    a = orders
    b = a - 1
    values = np.empty_like(orders)
    with np.errstate(over="ignore"):  # alpha eps past the float range: the logarithmic form
        rescaled = a * eps <= _LOG_FORM_FROM
    if np.any(rescaled):
        ar, br = a[rescaled], b[rescaled]
        # S / (eps^2 (alpha - 1)) with S = w1 h((alpha-1) eps) + w2 h(-alpha eps); D = log1p(S) / (alpha-1).
        scaled = (ar / (2 * ar - 1)) * (br * _exp_remainder_scaled(br * eps) + ar * _exp_remainder_scaled(-ar * eps))
        values[rescaled] = _log1p_over(scaled, br, eps)
    if not np.all(rescaled):
        al, bl = a[~rescaled], b[~rescaled]
        # alpha eps > 700: D = eps + log(w1 + w2 e^{-(2 alpha-1) eps}) / (alpha-1) >= eps - 1/alpha
        # with eps > 700/alpha: no cancellation; a few ulps of each term are added.
        with np.errstate(invalid="ignore", over="ignore"):
            tail = np.log1p(bl / (2 * al - 1) * np.expm1(-(2 * al - 1) * eps)) / bl
            values[~rescaled] = eps + tail + 8 * _UNIT_ROUNDOFF * (eps + np.abs(tail))
    return _round_up_curve(values)


def _log1p_over(scaled: FloatArray, b: FloatArray, eps: float) -> FloatArray:
    """log1p(S) / b for S = scaled * b * eps^2, without underflow for a tiny eps."""
    s = scaled * eps * eps * b
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(s > 0, np.log1p(s) / s, 1.0)  # log1p(S) / S
    result: FloatArray = (scaled * ratio * eps) * eps
    return result


def randomized_response_rdp(epsilon: float, k: int, orders: FloatArray) -> FloatArray:
    """Exact RDP of k-ary randomized response under replace-one, rounded up.

    The worst pair of neighbouring outputs is P = (e^eps, 1, 1, ...)/Z and Q = (1, e^eps, 1, ...)/Z
    with Z = e^eps + k - 1, so D_alpha = 1/(alpha-1) log((e^{alpha eps} + e^{(1-alpha) eps} + k - 2) / Z).
    For k = 2 this is the binary randomized response, which is also the worst case of *any*
    eps-DP mechanism: E_Q[L^alpha] is convex in the likelihood ratio L in [e^-eps, e^eps] with
    E_Q[L] = 1, so it is largest when L takes only the two extreme values.

    The likelihood ratio L is e^eps (Q-mass 1/Z), e^-eps (mass e^eps/Z) or 1, and E_Q[L] = 1, so
    E_Q[L^alpha] - 1 = (phi(eps) + e^eps phi(-eps)) / Z with phi(y) = e^{alpha y} - 1 - alpha (e^y - 1)
    >= 0: no cancellation, where the logarithm of the ratio above lost every digit for eps below
    ~1e-8 (randomized_response_rdp(1e-17, 4) was negative). Every value is >= 0 and at least the
    exact divergence.
    """
    a = orders
    b = a - 1
    log_z = float(np.logaddexp(epsilon, math.log(k - 1)))
    values = np.empty_like(orders)
    with np.errstate(over="ignore"):  # alpha eps past the float range: the logarithmic form
        rescaled = a * epsilon <= _LOG_FORM_FROM
    if np.any(rescaled):
        ar, br = a[rescaled], b[rescaled]
        if k - 1 < 2**1000:
            inverse_z, allowance = 1.0 / (math.exp(epsilon) + float(k - 1)), 0.0
        else:  # k - 1 beyond the float range: 1/Z from its logarithm, a few ulps of log Z more error
            inverse_z, allowance = math.exp(-log_z), 4 * _UNIT_ROUNDOFF * (log_z + 1)
        remainder = _power_remainder_scaled(ar, np.full_like(ar, epsilon))
        remainder += math.exp(epsilon) * _power_remainder_scaled(ar, np.full_like(ar, -epsilon))
        # S / (eps^2 (alpha - 1)), S = alpha^2 eps^2 (remainder) / Z.
        scaled = (remainder * inverse_z) * (ar / br) * ar * (1 + allowance)
        values[rescaled] = _log1p_over(scaled, br, epsilon)
    if not np.all(rescaled):
        al, bl = a[~rescaled], b[~rescaled]
        # alpha eps > 700: log E_Q[L^alpha] = (alpha-1) eps + log1p(e^{(1-2 alpha) eps} + (k-2) e^{-alpha eps})
        # - log1p((k-1) e^{-eps}), each term evaluated without overflow; the allowance covers a few
        # ulps of every term and of the exponents inside the log1p arguments.
        log_k = math.log(k)
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):
            gain = np.exp(-(2 * al - 1) * epsilon)
            if k > 2:
                gain = gain + np.exp(math.log(k - 2) - al * epsilon)
            loss = math.exp(min(math.log(k - 1) - epsilon, _LOG_FORM_FROM))
            up, down = np.log1p(gain), math.log1p(loss)
            # (The exponent of the first log1p argument can overflow where that argument is 0.)
            exponent_error = np.where(gain > 0, (al * epsilon + log_k) * np.minimum(gain, 1.0), 0.0)
            error = (
                8 * _UNIT_ROUNDOFF * (epsilon + (up + down) / bl)
                + 4 * _UNIT_ROUNDOFF * (exponent_error + (epsilon + log_k) * min(loss, 1.0)) / bl
            )
            values[~rescaled] = epsilon + (up - down) / bl + error
    return _round_up_curve(values)


def discrete_laplace_rdp(scale: float, sensitivity: int, orders: FloatArray) -> FloatArray:
    """Exact RDP of the discrete Laplace P(x) ∝ e^{-|x|/scale} shifted by an integer ``sensitivity``.

    With r = e^{-1/t} (t = scale), D = sensitivity and p(x) = (1-r)/(1+r) r^|x|, the sum
    sum_x p(x)^alpha p(x-D)^{1-alpha} splits into x <= 0 (a geometric series r^{(1-alpha) D}/(1-r)),
    x >= D (r^{alpha D}/(1-r)) and 0 < x < D (r^{(1-alpha) D} sum_{x=1}^{D-1} r^{(2 alpha-1) x}).
    Everything is summed in log space.
    """
    t, d = scale, sensitivity
    # The sum is 1 + O((alpha - 1) d^2 / t^2): in double precision its logarithm lost every digit
    # for large scales (t = 1e6: 4 digits too low, an invalid bound), so it is summed in mpmath.
    values = np.empty_like(orders)
    with mpmath.workdps(50 + max(0, int(2 * math.log10(max(t, 1.0))))):
        log_r = -1 / mpmath.mpf(t)
        r = mpmath.exp(log_r)
        norm = (1 - r) / (1 + r)
        for index, alpha in enumerate(orders):
            a = mpmath.mpf(float(alpha))
            total = (r ** ((1 - a) * d) + r ** (a * d)) / (1 - r)
            if d > 1:
                ratio = r ** (2 * a - 1)
                total += r ** ((1 - a) * d) * ratio * (1 - ratio ** (d - 1)) / (1 - ratio)
            value = mpmath.log(total * norm) / (a - 1)
            values[index] = math.nextafter(float(value), math.inf) if value > 0 else 0.0
    return values


def _log_a_integer(q: float, sigma: float, alpha: int) -> float:
    """log A_alpha for integer alpha (Mironov, Talwar & Zhang 2019, Sec. 3.3).

    A_alpha = sum_{k=0}^{alpha} C(alpha, k) (1-q)^{alpha-k} q^k exp((k^2 - k) / (2 sigma^2)).
    The binomial weights sum to one, so A_alpha - 1 is the same sum with exp replaced by expm1
    (the k = 0, 1 terms vanish): a sum of positive terms, and log A = log1p(A - 1) keeps its
    relative precision when A is within 1e-16 of 1 (small q, large sigma), where summing A
    itself returned log A = 0 or several digits too low.

    The result is rounded up: each log-space term is within a few ulps of the sum of its parts'
    magnitudes, which is the relative error of its exponential; the sum's relative error is at
    most those errors averaged with the terms' weights, and logsumexp and log1p add a few ulps.
    (Rounded to nearest, log A_2 came out up to 3e-15 below the exact value.)
    """
    if alpha < 2:
        return 0.0
    k = np.arange(2, alpha + 1, dtype=np.float64)
    log_binomial = special.gammaln(alpha + 1) - special.gammaln(k + 1) - special.gammaln(alpha - k + 1)
    exponent = (k * k - k) / (2 * sigma**2)
    log_expm1 = exponent + np.log(-np.expm1(-exponent))  # log(e^x - 1), no overflow
    parts = (log_binomial, k * math.log(q), (alpha - k) * math.log1p(-q), log_expm1)
    terms = sum(parts)
    magnitude = special.gammaln(alpha + 1) + sum(np.abs(part) for part in parts)
    log_sum = float(special.logsumexp(terms))
    weights = np.exp(terms - log_sum)
    relative = 8 * _UNIT_ROUNDOFF * (float(np.dot(weights, magnitude)) / float(np.sum(weights)) + 8)
    value = float(np.logaddexp(0.0, log_sum)) * (1 + relative)
    return math.nextafter(value, math.inf)


def _log_erfc(x: FloatArray) -> FloatArray:
    """log erfc(x), accurate far into the tail (erfc(x) = 2 Phi(-x sqrt 2))."""
    result: FloatArray = math.log(2.0) + special.log_ndtr(-x * math.sqrt(2.0))
    return result


_FRACTIONAL_TERMS_LIMIT = 1 << 16


def _log_a_fractional(q: float, sigma: float, alpha: float) -> tuple[float, float]:
    """Bounds on log A_alpha for fractional alpha (Mironov, Talwar & Zhang 2019, Sec. 3.3).

    The integral of ((1-q) + q e^{(2z-1)/(2 sigma^2)})^alpha against N(0, sigma^2) is split at
    z0 = sigma^2 log(1/q - 1) + 1/2, where the two summands are equal, and each side is expanded
    in the generalised binomial series that converges there; term i of the two together is
    C(alpha, i) m_i with m_i > 0. From N = floor(alpha) + 1 on, C(alpha, i) alternates in sign
    (positive at N) and m_i decreases: the ratio of consecutive terms of each side is at most
    |C(alpha, i+1) / C(alpha, i)| = (i - alpha) / (i + 1) < 1, using erfc(x + h) <= erfc(x)
    e^{-2xh - h^2} for h > 0 (the exponential factors then cancel exactly). So the series is, from
    N, an alternating series with decreasing terms (Leibniz): after term K the sum is within
    m_{K+1} of A_alpha, and S_K + m_{K+1} is an upper bound. Summing the signed terms (rather than
    their absolute values, as before) makes the bound tight: at alpha 1.1 to 1.5 it was 1% to 90%
    above the exact value. A rounding allowance for the log-space sums (scaled by the
    cancellation between the positive and negative terms) is added.

    Returns ``(lower, upper)``: log A_alpha lies between them (Leibniz brackets the limit on both
    sides). The sum is about 1 + O(q^2) in float64, so the bracket is at least a few ulps of 1
    wide; where log A is that small the caller uses :func:`_precise_fractional` instead.
    """
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    log_q, log_1mq = math.log(q), math.log1p(-q)
    first = math.floor(alpha) + 1  # from here on the coefficients alternate, + - + ...
    count = 64
    while count <= first:  # the Leibniz bound needs the omitted terms to alternate
        count *= 4
    while True:
        i = np.arange(count + 1, dtype=np.float64)  # terms 0..count-1 summed, term count bounds the rest
        j = alpha - i
        log_binomial = special.gammaln(alpha + 1) - special.gammaln(i + 1) - special.gammaln(j + 1)
        # gammaln gives log|Gamma|: the absolute value of the coefficient; its sign is applied below.
        log_s0 = (
            log_binomial
            + i * log_q
            + j * log_1mq
            + (i * i - i) / (2 * sigma**2)
            + math.log(0.5)
            + _log_erfc((i - z0) / (math.sqrt(2) * sigma))
        )
        log_s1 = (
            log_binomial
            + j * log_q
            + i * log_1mq
            + (j * j - j) / (2 * sigma**2)
            + math.log(0.5)
            + _log_erfc((z0 - j) / (math.sqrt(2) * sigma))
        )
        log_m = np.logaddexp(log_s0, log_s1)
        negative = (i > first) & ((i - first) % 2 == 1)
        summed = np.arange(count + 1) < count
        positive = float(special.logsumexp(log_m[summed & ~negative]))
        negatives = log_m[summed & negative]
        ratio = math.exp(float(special.logsumexp(negatives)) - positive) if negatives.size else 0.0
        if ratio < 1.0:
            partial = positive + math.log1p(-ratio)
            bound = float(np.logaddexp(partial, log_m[count]))  # Leibniz: within m_count of the limit
            if log_m[count] < partial - 30 or count >= _FRACTIONAL_TERMS_LIMIT:
                # Rounding: a few ulps of gammaln(alpha + 1) per log-space term and the summation,
                # relative to the positive and the negative sums, so scaled by their cancellation.
                ulps = 8 * 2.2e-16 * (float(special.gammaln(alpha + 1)) + 2 * math.log2(2 * count) + 8)
                allowance = ulps * (1 + ratio) / (1 - ratio)
                gap = float(log_m[count]) - partial
                lower = partial + math.log1p(-math.exp(gap)) if gap < 0 else -math.inf
                return lower - allowance, bound + allowance
        elif count >= _FRACTIONAL_TERMS_LIMIT:  # pragma: no cover - the partial sums are positive
            return -math.inf, math.inf
        count *= 4


#: A fractional order's float64 series is used when its bracket on log A_alpha is this tight
#: (relative); otherwise the region sums of :func:`_precise_fractional` are.
_FRACTIONAL_TOLERANCE = 1e-7
#: Relative accuracy the region sums aim at (their answer is an upper bound either way).
_PRECISE_TARGET = 1e-13
#: Most decimal digits the region sums may use before the float64 bounds are kept instead.
_PRECISE_DIGITS_LIMIT = 2000


class _RegionMoments:
    """The order-independent moments of the region series of :func:`_precise_fractional` for one
    (q, sigma), at ``digits`` decimal digits, computed as the series ask for them.

    With u = r e^l, r = q / (1 - q), l = (2z - 1) / (2 sigma^2) and z ~ N(0, sigma^2):
    E[u^t; a < z < b] = r^t e^((t^2 - t) / (2 sigma^2)) P(a < N(t, sigma^2) < b).
    """

    def __init__(self, q: float, sigma: float, digits: int) -> None:
        self.digits = digits
        with mpmath.workdps(digits):
            self.sigma = mpmath.mpf(sigma)
            self.one_minus_q = 1 - mpmath.mpf(q)
            self.log_r = mpmath.log(mpmath.mpf(q) / self.one_minus_q)
            z0 = -(self.sigma**2) * self.log_r + mpmath.mpf(1) / 2  # where u = 1
            width = self.sigma**2 * mpmath.log(2)  # u = 1/2 and u = 2 at z0 -+ width
            self.start, self.stop = z0 - width, z0 + width
        self._below: list[Any] = []  # E[u^i; z < start]
        self._middle: list[Any] = []  # E[u^j; start < z < stop]
        self._binomial: list[tuple[Any, Any]] = []  # 2^k E[v^k; middle] and sum_j C(k, j) E[u^j; middle]

    def moment(self, t: Any, low: Any, high: Any) -> Any:
        s = self.sigma
        if low is None:
            mass = mpmath.ncdf((high - t) / s)
        elif high is None:
            mass = mpmath.ncdf((t - low) / s)
        else:
            mass = mpmath.ncdf((high - t) / s) - mpmath.ncdf((low - t) / s)
        return mpmath.exp(t * self.log_r + (t * t - t) / (2 * s * s)) * mass

    def below(self, i: int) -> Any:
        while len(self._below) <= i:
            self._below.append(self.moment(len(self._below), None, self.start))
        return self._below[i]

    def above(self, t: Any) -> Any:
        return self.moment(t, self.stop, None)

    def middle(self, k: int) -> tuple[Any, Any]:
        """(2^k E[v^k; middle], sum_j C(k, j) E[u^j; middle]) with v = (u - 1) / 2."""
        while len(self._binomial) <= k:
            n = len(self._binomial)
            self._middle.append(self.moment(n, self.start, self.stop))
            binomial, signed, absolute = mpmath.mpf(1), mpmath.mpf(0), mpmath.mpf(0)
            for j in range(n, -1, -1):  # sum_j C(n, j) (-1)^(n - j) E[u^j]
                part = binomial * self._middle[j]
                signed += part if (n - j) % 2 == 0 else -part
                absolute += part
                binomial = binomial * j / (n - j + 1)
            self._binomial.append((signed, absolute))
        return self._binomial[k]


def _precise_fractional(q: float, sigma: float, alphas: Iterable[float]) -> list[float | None]:
    """Upper bounds on D_alpha = log A_alpha / (alpha - 1) within about 1e-13 (None where that
    would take more than ``_PRECISE_DIGITS_LIMIT`` digits), for fractional orders.

    A_alpha - 1 is of order alpha (alpha - 1) q^2 (e^(1/sigma^2) - 1) / 2: below 1e-16 for small q
    or large sigma, and (alpha - 1) times smaller still in log A. Any sum that forms A itself in
    float64 then has no correct digit left (the signed series of :func:`_log_a_fractional` was up
    to 2x the exact value at q <= 1e-5 near order 1, where the chord through the integer orders
    was used). So A - 1 is summed in mpmath, with enough digits for the cancellation of A's
    terms against 1, by series that converge geometrically with a bound on what they leave out.

    With u as in :class:`_RegionMoments` (u = e^(privacy loss of the inner Gaussian) q / (1 - q)),
    the likelihood ratio is (1 - q)(1 + u), and u = 1 at z0 = sigma^2 log(1/r) + 1/2. Mironov,
    Talwar & Zhang (2019, Sec. 3.3) expand (1 + u)^alpha on either side of z0, in powers of u and
    of 1/u; those series converge slowly near z0 (terms of order |C(alpha, i)|). Here the line is
    cut into three regions instead, each with an expansion of ratio at most 1/2:
    z < z0 - sigma^2 log 2 (u <= 1/2): (1 + u)^alpha = sum_i C(alpha, i) u^i;
    z > z0 + sigma^2 log 2 (u >= 2): u^alpha sum_i C(alpha, i) u^(-i);
    between (1/2 <= u <= 2): 2^alpha sum_k C(alpha, k) v^k with v = (u - 1)/2, |v| <= 1/2.
    For i >= K > alpha, |C(alpha, i)| <= |C(alpha, K)| and each further power gains a factor of
    at most 1/2, so the terms after term K add up to at most |term K| (in the middle region with
    K even, so that |v|^K = v^K). Rounding: each term is within a few units of the working
    precision of its size (of sum_j C(k, j) E[u^j] for the middle region's binomial sums), counted
    generously. The digits are chosen from the size of A - 1 and raised until the bound is within
    ``_PRECISE_TARGET``. The moments do not depend on the order except above the middle, so they
    are shared by all orders (:class:`_RegionMoments`).
    """
    tables: dict[int, _RegionMoments] = {}
    results: list[float | None] = []
    for alpha in alphas:
        # A - 1 ~ alpha (alpha - 1) q^2 expm1(1/sigma^2) / 2 for small q: the digits to cancel against 1.
        log10_guess = (
            math.log10(alpha * (alpha - 1) / 2) + 2 * math.log10(q) + math.log10(max(math.expm1(sigma**-2), 1e-300))
        )
        digits = 30 + max(0, math.ceil(-log10_guess))
        digits = next((d for d in sorted(tables) if d >= digits), digits)  # reuse deeper moments
        result: float | None = None
        while digits <= _PRECISE_DIGITS_LIMIT:
            table = tables.setdefault(digits, _RegionMoments(q, sigma, digits))
            with mpmath.workdps(digits):
                threshold = mpmath.power(10, log10_guess) * _PRECISE_TARGET / 4
                value, error = _region_sums(table, alpha, threshold)
                if value > 0 and error <= _PRECISE_TARGET * value:
                    bound = mpmath.log1p(value + error) / (mpmath.mpf(alpha) - 1)
                    result = math.nextafter(float(bound), math.inf)
                    break
                # The guess was too large (or the digits too few): retry from the sum found.
                log10_guess = float(mpmath.log10(value)) if value > 0 else log10_guess - 10
            digits = max(digits + 20, 30 + math.ceil(-log10_guess))
        results.append(result)
    return results


def _region_sums(table: _RegionMoments, alpha: float, threshold: Any) -> tuple[Any, Any]:
    """(A_alpha - 1, a bound on its error) at the table's precision, by the three region series of
    :func:`_precise_fractional`; each series stops at a term K > alpha (even in the middle region)
    whose size, the bound on the rest, is at most ``threshold``."""
    a = mpmath.mpf(alpha)
    first = math.floor(alpha) + 1
    total, size, rest = mpmath.mpf(0), mpmath.mpf(0), mpmath.mpf(0)  # sum, sum of |terms|, tails
    # Above the middle (1 + u)^alpha <= (3u/2)^alpha: where that bounds the whole region's part
    # below the threshold, it is counted as the tail, without the series.
    above = mpmath.power(mpmath.mpf(3) / 2, a) * table.above(a)
    sides = (True,) if above <= threshold else (True, False)
    if above <= threshold:
        rest += above
    for below in sides:
        coefficient, i = mpmath.mpf(1), 0  # C(alpha, i)
        while True:
            term = coefficient * (table.below(i) if below else table.above(a - i))
            total += term
            size += abs(term)
            if i >= first and abs(term) <= threshold:
                rest += abs(term)
                break
            coefficient = coefficient * (a - i) / (i + 1)
            i += 1
    coefficient, k = mpmath.mpf(1), 0
    two_alpha = mpmath.power(2, a)
    while True:
        signed, absolute = table.middle(k)
        scale = two_alpha * coefficient / mpmath.power(2, k)
        term = scale * signed
        total += term
        size += abs(scale) * absolute
        if k >= first and k % 2 == 0 and abs(term) <= threshold:
            rest += abs(term)
            break
        coefficient = coefficient * (a - k) / (k + 1)
        k += 1
    factor = mpmath.power(table.one_minus_q, a)
    value = factor * total - 1
    # a few units of the working precision per term and operation, generously
    unit = mpmath.power(10, 8 - table.digits)
    error = factor * (rest + size * unit) + unit
    return value, error


def poisson_sampled_gaussian_rdp(q: float, noise_multiplier: float, orders: FloatArray) -> FloatArray:
    """RDP of the Poisson-subsampled Gaussian, add/remove neighbours (Mironov, Talwar & Zhang 2019).

    epsilon(alpha) = log(A_alpha) / (alpha - 1), with A_alpha = E_{z ~ mu0}[(mu(z)/mu0(z))^alpha],
    mu0 = N(0, sigma^2), mu = (1-q) mu0 + q N(1, sigma^2); their Theorem 5 shows this direction
    dominates the other. Every value is an upper bound on the exact divergence: integer orders
    by the closed form, fractional ones by the float64 signed series where its bracket is within
    ``_FRACTIONAL_TOLERANCE`` (relative), else by high-precision region sums (within about 1e-13;
    for q <= 1e-5 the float64 sums had no correct digit near order 1 and answered up to 2x).
    """
    if q == 1.0:
        return gaussian_rdp(noise_multiplier, orders)
    integer_log_a: dict[int, float] = {1: 0.0}  # A_1 = 1

    def log_a_at(order: int) -> float:
        if order not in integer_log_a:
            # log A is >= 0 in exact arithmetic (Rényi divergences are non-negative).
            integer_log_a[order] = max(_log_a_integer(q, noise_multiplier, order), 0.0)
        return integer_log_a[order]

    def divided(log_a: float, alpha: float) -> float:
        # D = log A / (alpha - 1), rounded up (log A is itself an upper bound)
        return math.nextafter(log_a / (alpha - 1), math.inf)

    values = np.empty_like(orders)
    loose: list[int] = []
    for index, alpha in enumerate(orders):
        if float(alpha).is_integer():
            values[index] = divided(log_a_at(int(alpha)), alpha)
            continue
        lower, upper = _log_a_fractional(q, noise_multiplier, float(alpha))
        # log A_alpha = (alpha-1) D_alpha is convex in alpha (it is the log moment generating
        # function of the privacy loss), so between the integers around alpha it lies below the
        # chord through the exact integer values; keep whichever bound is smaller.
        low = math.floor(alpha)
        weight = alpha - low
        chord = (1 - weight) * log_a_at(low) + weight * log_a_at(low + 1)
        chord = math.nextafter(chord * (1 + 4 * _UNIT_ROUNDOFF), math.inf)  # three roundings
        values[index] = divided(max(min(upper, chord), 0.0), alpha)
        if not upper - lower <= _FRACTIONAL_TOLERANCE * upper:
            loose.append(index)
    # Where the float64 bracket is loose (log A near the float64 rounding of 1: small q, large
    # sigma, orders near 1), sum A - 1 in high precision instead.
    for index, precise in zip(loose, _precise_fractional(q, noise_multiplier, orders[loose]), strict=True):
        if precise is not None:
            values[index] = min(values[index], precise)
    return values


# -- interpreting events --------------------------------------------------------------------------


def _effective_gaussian(event: PrivacyEvent, relation: NeighbourRelation) -> float | None:
    """The single Gaussian noise multiplier equivalent to ``event`` if it is made of Gaussians.

    Gaussians run together on the same data compose to one Gaussian with
    sigma^-2 = sum_i sigma_i^-2 (their RDP curves add).
    """
    if isinstance(event, GaussianEvent):
        return event.noise_multiplier if event.neighbours is relation else None
    if isinstance(event, SelfComposedEvent):
        inner = _effective_gaussian(event.event, relation)
        return None if inner is None else inner / math.sqrt(event.count)
    if isinstance(event, ComposedEvent) and event.events:
        precisions = [_effective_gaussian(inner, relation) for inner in event.events]
        if any(sigma is None for sigma in precisions):
            return None
        return 1.0 / math.sqrt(sum(sigma**-2 for sigma in precisions if sigma is not None))
    return None


@functools.singledispatch
def _curve(event: PrivacyEvent, orders: FloatArray, relation: NeighbourRelation) -> FloatArray | None:
    """The RDP curve of one event at ``orders``, or None when this accountant cannot bound it."""
    return None


@_curve.register
def _(event: GaussianEvent, orders: FloatArray, relation: NeighbourRelation) -> FloatArray | None:
    return gaussian_rdp(event.noise_multiplier, orders)


@_curve.register
def _(event: DiscreteGaussianEvent, orders: FloatArray, relation: NeighbourRelation) -> FloatArray | None:
    # Canonne, Kamath & Steinke 2020, Prop. 5 / Thm. 14: the discrete Gaussian has the same
    # Rényi bound alpha Delta^2 / (2 sigma^2) as the continuous one.
    return orders * (0.5 * inverse_square(event.sigma / event.sensitivity))


@_curve.register
def _(event: LaplaceEvent, orders: FloatArray, relation: NeighbourRelation) -> FloatArray | None:
    return laplace_rdp(event.noise_multiplier, orders)


@_curve.register
def _(event: DiscreteLaplaceEvent, orders: FloatArray, relation: NeighbourRelation) -> FloatArray | None:
    return discrete_laplace_rdp(event.scale, event.sensitivity, orders)


@_curve.register
def _(event: PureDPEvent, orders: FloatArray, relation: NeighbourRelation) -> FloatArray | None:
    return randomized_response_rdp(event.epsilon, 2, orders)


@_curve.register
def _(event: RandomizedResponseEvent, orders: FloatArray, relation: NeighbourRelation) -> FloatArray | None:
    return randomized_response_rdp(event.epsilon, event.k, orders)


@_curve.register
def _(event: ZCDPEvent, orders: FloatArray, relation: NeighbourRelation) -> FloatArray | None:
    return event.rho * orders


@_curve.register
def _(event: PoissonSampledEvent, orders: FloatArray, relation: NeighbourRelation) -> FloatArray | None:
    # The sampled-Gaussian analysis is for add/remove neighbours only (a replacement changes
    # the sample's composition in two places).
    if relation is not NeighbourRelation.ADD_REMOVE:
        return None
    sigma = _effective_gaussian(event.event, relation)
    if sigma is None:
        return None
    return poisson_sampled_gaussian_rdp(event.sampling_probability, sigma, orders)


@_curve.register
def _(event: GroupEvent, orders: FloatArray, relation: NeighbourRelation) -> FloatArray | None:
    grouped = grouped_event(event.event, event.size)
    if grouped is None:
        return None
    total = np.zeros_like(orders)
    for part, times in _atoms(grouped, 1):
        if getattr(part, "neighbours", relation) is not relation:
            return None
        curve = _curve(part, orders, relation)
        if curve is None:
            return None
        total += times * curve
    return total


def _atoms(event: PrivacyEvent, count: int) -> list[tuple[PrivacyEvent, int]]:
    if isinstance(event, SelfComposedEvent):
        return _atoms(event.event, count * event.count)
    if isinstance(event, ComposedEvent):
        return [atom for inner in event.events for atom in _atoms(inner, count)]
    return [(event, count)]


# -- RDP -> (epsilon, delta) --------------------------------------------------------------------


def rdp_to_epsilon(orders: FloatArray, rdp: FloatArray, delta: float) -> tuple[float, float]:
    """The smallest epsilon (and its order) that an RDP curve certifies at ``delta``.

    Canonne, Kamath & Steinke 2020, Prop. 12 (also Asoodeh et al. 2021, eq. 20):
    (alpha, r)-RDP implies (eps, delta)-DP with
    eps = r + log(1 - 1/alpha) - (log delta + log alpha) / (alpha - 1).
    And when delta >= sqrt(1 - e^{-r}) at some order, epsilon = 0 holds: the total variation
    distance is at most sqrt(1 - e^{-KL}) (Bretagnolle-Huber) and KL <= D_alpha for alpha > 1.
    """
    if delta == 0:
        return math.inf, math.inf
    with np.errstate(over="ignore", invalid="ignore"):
        eps = rdp + np.log1p(-1 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
        eps = np.where(delta**2 + np.expm1(-rdp) >= 0, 0.0, eps)
        eps = np.where(np.isnan(eps), math.inf, eps)
    best = int(np.argmin(eps))
    return max(0.0, float(eps[best])), float(orders[best])


def rdp_to_delta(orders: FloatArray, rdp: FloatArray, epsilon: float) -> tuple[float, float]:
    """The smallest delta (and its order) an RDP curve certifies at ``epsilon``.

    Canonne, Kamath & Steinke 2020, Prop. 12:
    log delta = (alpha - 1)(r - eps + log(1 - 1/alpha)) - log alpha; and delta <= sqrt(1 - e^{-r})
    (Bretagnolle-Huber with KL <= D_alpha).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        log_delta = (orders - 1) * (rdp - epsilon + np.log1p(-1 / orders)) - np.log(orders)
        log_tv = 0.5 * np.log(-np.expm1(-rdp))
        log_delta = np.minimum(log_delta, log_tv)
        log_delta = np.where(np.isnan(log_delta), math.inf, log_delta)
    best = int(np.argmin(log_delta))
    return min(1.0, math.exp(float(log_delta[best]))), float(orders[best])


class RDPAccountant(PrivacyAccountant):
    """Rényi DP accountant (the moments accountant), with the tight RDP -> (epsilon, delta) conversion.

    Tracks epsilon(alpha) at a fixed set of orders (dp_accounting's defaults unless ``orders`` is
    given). Supports Gaussian, discrete Gaussian, Laplace, discrete Laplace, pure DP, randomized
    response and zCDP events, group privacy of those, and Poisson-subsampled Gaussians (under
    add/remove). Answers are certified upper bounds.

    >>> from dpkit.events import dpsgd_event
    >>> accountant = RDPAccountant().compose(dpsgd_event(1.1, 256 / 60000, 14063))
    >>> round(accountant.epsilon(1e-5), 3)
    2.597
    """

    def __init__(
        self,
        orders: Iterable[float] | None = None,
        neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE,
    ) -> None:
        checked = _check_orders(orders)
        super().__init__(neighbours)
        self._orders = checked
        self._rdp = np.zeros_like(checked)
        # Curves computed while checking support, reused when composing (the check runs first).
        self._curves: dict[PrivacyEvent, FloatArray] = {}

    @property
    def orders(self) -> FloatArray:
        """The Rényi orders tracked (sorted, > 1)."""
        return self._orders.copy()

    def rdp_curve(self) -> tuple[FloatArray, FloatArray]:
        """The composed curve: (orders, epsilon(alpha) at each order)."""
        return self._orders.copy(), self._rdp.copy()

    def _supports_atomic(self, event: PrivacyEvent) -> bool:
        if event in self._curves:
            return True
        curve = _curve(event, self._orders, self.neighbours)
        if curve is None or np.any(np.isnan(curve)):
            return False
        if len(self._curves) >= 256:
            self._curves.clear()
        self._curves[event] = curve
        return True

    def _compose_atomic(self, event: PrivacyEvent, count: int) -> None:
        curve = self._curves.get(event)
        if curve is None:  # evicted between the check and the composition
            curve = _curve(event, self._orders, self.neighbours)
            assert curve is not None
        self._rdp = self._rdp + count * curve

    def _epsilon(self, delta: float) -> float:
        eps, _ = rdp_to_epsilon(self._orders, self._rdp, delta)
        if eps == 0.0 or math.isinf(eps):
            return eps
        return eps * (1 + _RELATIVE_SLACK) + _ABSOLUTE_SLACK

    def _delta(self, epsilon: float) -> float:
        delta, _ = rdp_to_delta(self._orders, self._rdp, epsilon)
        # The conversion is computed in log space, so its rounding is relative; an absolute
        # slack of 1e-12 here made every delta at least 1e-12 (true values reach 1e-300).
        return min(1.0, math.nextafter(delta * (1 + 1e3 * _RELATIVE_SLACK), math.inf))
