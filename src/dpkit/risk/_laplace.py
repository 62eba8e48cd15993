"""Privacy at risk of the Laplace mechanism: the explicit randomness of the noise.

Dandekar, Basu & Bressan, "Differential Privacy at Risk: Bridging Randomness and Privacy
Budget", PoPETs 2021(1), arXiv:2003.00973, Sec. 4.1, Theorem 4 (summarised in French by
Dandekar, Basu, Senellart & Bressan, BDA 2020, seed 001).

**The statement implemented (exactly).** The Laplace mechanism ``M(x) = f(x) + eta``, with ``f``
of L1 sensitivity ``Delta`` and ``eta = (eta_1, ..., eta_k)`` independent ``Laplace(Delta /
epsilon0)`` coordinates, is ``epsilon0``-DP. With the noise statistic

    T = (epsilon0 / Delta) |eta_1 + ... + eta_k|,

:func:`laplace_confidence` returns

    c_k(epsilon; epsilon0) = P[T <= epsilon | T <= epsilon0] = F_k(epsilon) / F_k(epsilon0)

for ``0 <= epsilon <= epsilon0`` (1 for ``epsilon >= epsilon0``), ``F_k`` the CDF of ``|S_k|``,
``S_k`` a sum of ``k`` standard Laplace variables; the **risk** is ``1 - c_k``. This is the
paper's ``gamma_1``: the theorem's text was not available to us, but its formula, as the
authors implement it (github.com/ashishdandekar/Privacy-at-risk, ``formulae.py``, ``bound(e1, e2,
n)``: a ratio of a hypergeometric closed form at ``e1`` and ``e2``), equals ``c_k`` for every
``k`` (``tests/data/privacy_at_risk_reference.csv``, 1e-12), and for ``k = 1`` it is the issue's
``(1 - e^-epsilon) / (1 - e^-epsilon0)``.

**Why it is correct.** ``(epsilon0 / Delta) eta_i`` are independent standard Laplace variables,
so ``T = |S_k|`` in law, and the first equality is the definition of a conditional probability
(``{T <= epsilon}`` is inside ``{T <= epsilon0}``). A standard Laplace variable is a difference of
two independent ``Exp(1)``, so ``S_k = G - G'`` with ``G, G'`` independent ``Gamma(k, 1)``; for
``x > 0`` its density is ``e^-x / Gamma(k)^2 int_0^inf (x + y)^(k-1) y^(k-1) e^(-2y) dy``, and
expanding ``(x + y)^(k-1)`` binomially makes ``|S_k|`` a finite mixture of Gamma laws (the
half-integer Bessel function ``K_{k - 1/2}`` of the paper's "Bessel-K" law is elementary):

    F_k(x) = sum_{j=0}^{k-1} C(k-1+j, j) 2^{-(k-1+j)} P(k - j, x),

``P`` the regularised lower incomplete gamma function (weights summing to 1). The confidence
increases in ``epsilon``, decreases in ``epsilon0`` (``F_k`` is a CDF) and in ``k`` (checked in
the tests); the law of ``T`` is checked by simulation at a false-alarm rate of 1e-6.

**What it is not: the probability that the realised privacy loss is at most epsilon.** From
first principles, for neighbours with ``f(x) - f(y) = v``, ``|v|_1 <= Delta``, and the output
``z = f(x) + eta``, the privacy loss is ``L = (epsilon0 / Delta) sum_i (|eta_i + v_i| - |eta_i|)``,
always in ``[-epsilon0, epsilon0]``, and it is *not* bounded by ``T`` (at ``eta = 0``, ``T = 0``
while ``L = epsilon0 |v|_1 / Delta``). For a change along one coordinate (``v = Delta e_1``) the
other coordinates cancel and, whatever ``k``, ``P[L <= epsilon] = e^{-(epsilon0 - epsilon)/2} / 2``
for ``-epsilon0 <= epsilon < epsilon0``, below 1/2 (:func:`dpkit.risk.laplace_loss_confidence`,
checked by simulation). ``c_k`` is thus the paper's model of the noise, conditioned on ``T <= epsilon0``; it
is reported as that and never as a bound on ``P[L <= epsilon]``. The composition bound built
on it stays a guarantee for another reason (see :mod:`dpkit.risk._composition`).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from dpkit._errors import InvalidParameterError
from dpkit._lazy import LazyModule
from dpkit._validation import check_epsilon, check_integer, check_positive, check_probability

optimize = LazyModule("scipy.optimize")
special = LazyModule("scipy.special")
stats = LazyModule("scipy.stats")

__all__ = ["abs_laplace_sum_cdf", "epsilon_at_risk", "laplace_confidence", "laplace_risk"]

#: The largest ``dimension`` accepted: ``F_k`` is a mixture of ``k`` gamma laws, evaluated term by
#: term (at the limit, 0.1 s per evaluation, 12 s for :func:`epsilon_at_risk`). A larger int (10**400
#: was numpy's "Maximum allowed size exceeded", 10**9 gigabytes of arrays) is refused by name.
MAX_DIMENSION = 10**6

# Below this argument F_k(x) = w_{k-1} (1 - e^-x) (1 + x/2 + ...): the other terms of the mixture are
# x / 2 relative, far below float rounding. Used where F_k itself would underflow (k >= 2, x ~ 1e-320).
_TINY = 1e-20


def check_dimension(dimension: Any) -> int:
    """``dimension`` as an int in ``[1, MAX_DIMENSION]``, or InvalidParameterError naming it."""
    k = check_integer("dimension", dimension, minimum=1)
    if k > MAX_DIMENSION:
        raise InvalidParameterError(
            "dimension", dimension, f"must be an integer in [1, {MAX_DIMENSION}] (the number of noisy coordinates)"
        )
    return k


def abs_laplace_sum_cdf(x: float, dimension: int) -> float:
    """``P[|S_k| <= x]`` for ``S_k`` a sum of ``k = dimension`` standard Laplace variables (exact).

    >>> round(abs_laplace_sum_cdf(1.0, 1), 6) == round(1 - math.exp(-1.0), 6)
    True
    """
    k = check_dimension(dimension)
    x = check_positive("x", x, allow_zero=True, allow_inf=True)
    return cdf_unchecked(x, k)


def cdf_unchecked(x: float, k: int) -> float:
    """F_k(x) for validated x >= 0 (inf allowed) and k."""
    if x == 0.0:
        return 0.0
    if math.isinf(x):
        return 1.0
    shapes, weights = mixture_weights(k)
    value = float(np.sum(weights * special.gammainc(shapes, x)))
    return min(1.0, max(0.0, value))


@functools.lru_cache(maxsize=8)
def mixture_weights(k: int) -> tuple[Any, Any]:
    """The shapes k - j and weights C(k-1+j, j) 2^-(k-1+j) of F_k = sum_j w_j P(k - j, .) (read-only).

    ``w_j`` is twice the negative binomial pmf ``NB(j; k, 1/2)``, taken from scipy (Boost): to a few
    ulps for every k, where ``exp`` of a difference of ``gammaln`` lost ``1e-16 k ln k`` (1.7e-9 at
    ``k = 10**6``, 1.3e-12 at ``k = 1000``; checked against mpmath).
    """
    j = np.arange(k, dtype=np.float64)
    shapes, weights = k - j, 2.0 * stats.nbinom.pmf(j, k, 0.5)
    shapes.setflags(write=False)
    weights.setflags(write=False)
    return shapes, weights


def _abs_laplace_sum_mass(low: float, high: float, k: int) -> float:
    """``P[low < |S_k| <= high]`` without cancellation (for the risk near 0 and 1)."""
    shapes, weights = mixture_weights(k)
    lower_tail = float(np.sum(weights * special.gammainc(shapes, high)))
    upper_tail = float(np.sum(weights * special.gammaincc(shapes, low)))
    if lower_tail <= 0.5:  # F(high) - F(low), F(low) <= F(high) <= 1/2
        below = float(np.sum(weights * special.gammainc(shapes, low)))
        if below <= 0.5 * lower_tail:
            return max(0.0, lower_tail - below)
    else:  # S(low) - S(high)
        above = float(np.sum(weights * special.gammaincc(shapes, high)))
        if above <= 0.5 * upper_tail:
            return max(0.0, upper_tail - above)
    # low and high close: integrate the density (Gauss-Legendre, 40 nodes) over [low, high]
    nodes, node_weights = np.polynomial.legendre.leggauss(40)
    x = (high - low) / 2 * nodes + (high + low) / 2
    log_density = (shapes[:, None] - 1) * np.log(x)[None, :] - x[None, :] - special.gammaln(shapes)[:, None]
    density = np.sum(weights[:, None] * np.exp(log_density), axis=0)
    return float((high - low) / 2 * np.sum(node_weights * density))


def _check_pair(epsilon: Any, epsilon0: Any, dimension: Any) -> tuple[float, float, int]:
    eps = check_positive("epsilon", epsilon, allow_zero=True, allow_inf=True)
    eps0 = check_epsilon(epsilon0, "epsilon0")
    k = check_dimension(dimension)
    return eps, eps0, k


def confidence_unchecked(eps: float, eps0: float, k: int) -> float:
    """``c_k(eps; eps0)`` for validated ``eps >= 0``, ``k`` and ``0 < eps0 <= inf``.

    ``eps0 = inf`` stands for a calibration beyond the float range (computed by a caller as a
    product that overflowed): ``c_k = F_k(eps) / F_k(inf) = F_k(eps)``, the limit, and below the
    value at any finite ``eps0`` (a confidence rounded down).
    """
    if eps >= eps0:
        return 1.0
    if math.isinf(eps0):
        return cdf_unchecked(eps, k)
    if k == 1 or eps0 < _TINY:
        # closed form c_1, with expm1 for accuracy at small epsilon; for k >= 2 and eps <= eps0 < 1e-20
        # the common factor w_{k-1} of F_k cancels, to a relative eps0 / 2 (F_k would underflow)
        return min(1.0, math.expm1(-eps) / math.expm1(-eps0))
    denominator = cdf_unchecked(eps0, k)
    if eps < _TINY:  # F_k(eps) = w_{k-1} (1 - e^-eps), kept off the subnormal range
        return min(1.0, float(mixture_weights(k)[1][-1]) / denominator * -math.expm1(-eps))
    return min(1.0, cdf_unchecked(eps, k) / denominator)


def laplace_confidence(epsilon: float, epsilon0: float, dimension: int = 1) -> float:
    """Returns a **confidence** about the noise, ``P[T <= epsilon | T <= epsilon0]``; not ``P[loss <= epsilon]``.

    ``c_k(epsilon) = P[T <= epsilon | T <= epsilon0] = F_k(epsilon) / F_k(epsilon0)`` for
    ``epsilon <= epsilon0``, 1 above, with ``T = (epsilon0 / Delta) |eta_1 + ... + eta_k|`` the
    noise statistic of the paper's ``gamma_1`` (Dandekar, Basu & Bressan 2021, Thm. 4). It is a
    probability about the noise, not ``P[L <= epsilon]`` for the realised privacy loss ``L``
    (that is :func:`dpkit.risk.laplace_loss_confidence`); see the module docstring. ``dimension``
    is the number ``k`` of noisy coordinates.

    >>> round(laplace_confidence(0.5, 1.0), 6)   # (1 - e^-0.5) / (1 - e^-1)
    0.622459
    >>> laplace_confidence(2.0, 1.0)
    1.0
    """
    eps, eps0, k = _check_pair(epsilon, epsilon0, dimension)
    return confidence_unchecked(eps, eps0, k)


def laplace_risk(epsilon: float, epsilon0: float, dimension: int = 1) -> float:
    """Returns a **risk** about the noise, ``P[T > epsilon | T <= epsilon0]``; not ``P[loss > epsilon]``.

    ``1 - laplace_confidence(epsilon, epsilon0, dimension)``: the paper's ``gamma`` (Dandekar, Basu &
    Bressan 2021, Thm. 4) for the noise statistic ``T = (epsilon0 / Delta) |eta_1 + ... + eta_k|``
    of the ``epsilon0``-Laplace mechanism with ``k = dimension`` noisy coordinates. It is **not**
    the probability that the realised privacy loss ``L`` exceeds ``epsilon``: for the worst
    neighbouring pair that is ``1 - laplace_loss_confidence(epsilon, epsilon0)``, above 1/2 for
    every ``epsilon < epsilon0`` (see the module docstring).

    >>> round(laplace_risk(0.5, 1.0), 6)   # noise statistic: P[T > 0.5 | T <= 1]
    0.377541
    >>> from dpkit.risk import laplace_loss_confidence
    >>> round(1 - laplace_loss_confidence(0.5, 1.0), 6)   # realised loss, worst pair: P[L > 0.5]
    0.6106
    """
    eps, eps0, k = _check_pair(epsilon, epsilon0, dimension)
    return risk_unchecked(eps, eps0, k)


def risk_unchecked(eps: float, eps0: float, k: int) -> float:
    """``1 - c_k(eps; eps0)`` for validated finite ``eps0 > 0``, ``eps >= 0`` and ``k``."""
    if eps >= eps0:
        return 0.0
    if k == 1 or eps0 < _TINY:  # k >= 2 below 1e-20: c_k = c_1 to a relative eps0 / 2 (see confidence_unchecked)
        # 1 - c_1 = (e^-eps - e^-eps0) / (1 - e^-eps0), computed without cancellation
        return max(0.0, math.exp(-eps) * -math.expm1(eps - eps0) / -math.expm1(-eps0))
    # 1 - c_k = P[eps < T <= eps0] / F_k(eps0), without the cancellation of 1 - c_k near c_k = 1
    return min(1.0, _abs_laplace_sum_mass(eps, eps0, k) / cdf_unchecked(eps0, k))


def epsilon_at_risk(risk: float, epsilon0: float, dimension: int = 1) -> float:
    """Returns an **epsilon**: the smallest ``epsilon`` whose noise risk :func:`laplace_risk` is at most ``risk``.

    Inverse of :func:`laplace_risk` (a probability about the noise statistic ``T``, not about the
    realised privacy loss) in ``epsilon`` (closed form for ``k = 1``,
    ``epsilon = -ln(1 - (1 - risk)(1 - e^-epsilon0))``; a bracketed root on ``[0, epsilon0]``
    otherwise). ``risk = 0`` gives ``epsilon0``, ``risk = 1`` gives 0.

    >>> round(epsilon_at_risk(0.377541, 1.0), 4)
    0.5
    >>> epsilon_at_risk(0.0, 0.7)
    0.7
    """
    gamma = check_probability("risk", risk)
    eps0 = check_epsilon(epsilon0, "epsilon0")
    k = check_dimension(dimension)
    if gamma == 0.0:
        return eps0
    if gamma == 1.0:
        return 0.0
    target = 1.0 - gamma  # exact for gamma >= 1/2, where it is used
    if k == 1 or eps0 < _TINY:  # k >= 2 below 1e-20: the risk is c_1's (see confidence_unchecked)
        tail = gamma * -math.expm1(-eps0) + math.exp(-eps0)  # e^-eps, accurate for small gamma
        if tail < 0.5:  # eps > ln 2: -ln(tail) keeps gamma's digits (1 - gamma would lose them)
            root = min(eps0, -math.log(tail))
        else:
            root = min(eps0, -math.log1p((1.0 - gamma) * math.expm1(-eps0)))
    else:
        # root of the smaller of risk and confidence (each accurate near 0), to full relative precision
        def excess(e: float) -> float:
            return risk_unchecked(e, eps0, k) - gamma if gamma < 0.5 else target - confidence_unchecked(e, eps0, k)

        root = float(
            optimize.brentq(
                excess,
                0.0,
                eps0,
                xtol=1e-300,
                rtol=1e-15,
                maxiter=2000,
            )
        )

    def holds(e: float) -> bool:  # risk(e) <= gamma in the accurate form, with a margin for its rounding
        if gamma < 0.5:
            return risk_unchecked(e, eps0, k) <= gamma * (1.0 - 1e-13)
        return confidence_unchecked(e, eps0, k) >= target * (1.0 + 1e-13)

    # the returned epsilon must have risk <= gamma: step up (by doubling steps) past the rounding
    step = math.ulp(root) if root > 0 else 5e-324
    for _ in range(200):
        if root >= eps0 or holds(root):
            break
        root, step = root + step, 2 * step
    return min(root, eps0)
