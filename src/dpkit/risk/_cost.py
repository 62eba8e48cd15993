"""The cost model: from a privacy level to a compensation budget (GDPR illustration).

Dandekar, Basu & Bressan, "Differential Privacy at Risk", PoPETs 2021(1), Sec. 5 (seed 001,
eq. (2)): a breach of data processed under ``epsilon``-DP costs each stakeholder

    E_epsilon = E_min + E e^{-c / epsilon},

increasing in ``epsilon`` (from ``E_min`` towards ``E_min + E``), convex for ``epsilon <= c / 2``.
Promising ``epsilon`` for the ``epsilon0``-calibrated Laplace mechanism holds with confidence
``c_1(epsilon)``; otherwise the fallback guarantee ``epsilon0`` applies, so the expected budget is

    B(epsilon) = c_1(epsilon) E_epsilon + (1 - c_1(epsilon)) E_{epsilon0}.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpkit._lazy import LazyModule
from dpkit._search import bisect_floats
from dpkit._validation import check_epsilon, check_positive
from dpkit.risk._laplace import cdf_unchecked, check_dimension, confidence_unchecked, mixture_weights, risk_unchecked

optimize = LazyModule("scipy.optimize")
special = LazyModule("scipy.special")
stats = LazyModule("scipy.stats")

__all__ = ["CostModel"]

# Taylor coefficients 1 / (n + 2)! of r(x) = (e^x - 1 - x) / x^2 = sum_n x^n / (n + 2)!, highest first
# (26 terms: the first omitted, 2^26 / 28!, is 2e-22 relative at x = 2).
_R_COEFFICIENTS = tuple(1.0 / math.factorial(n + 2) for n in reversed(range(26)))
# coefficients 1 / (2n + 3) of atanh(s) - s = s^3 sum_n s^(2n) / (2n + 3), highest first (s^2 <= 1/9: 1e-18)
_ATANH_COEFFICIENTS = tuple(1.0 / (2 * n + 3) for n in reversed(range(18)))


def _horner(coefficients: tuple[float, ...], x: float) -> float:
    value = 0.0
    for coefficient in coefficients:
        value = value * x + coefficient
    return value


def _optimum_sign(c: float, eps0: float, k: int) -> Callable[[float], float]:
    """A function with the sign of ``B'`` on ``(0, eps0]``, accurate to float rounding near its root.

    ``B'`` has the sign of ``g(eps) = c/eps0 - c/eps + ln(1 + u)``, ``u = c R_k(eps) / eps^2`` with
    ``R_k = c_k / c_k' = F_k / f_k`` (``R_1 = e^eps - 1``; see :meth:`CostModel.optimal_epsilon`). For
    a small steepness ``c`` the root is near ``sqrt(c eps0 / (eps0 + 2))`` (``k = 1``), where ``c / eps``
    and ``ln(1 + u)`` are both about ``sqrt(c)`` and cancel down to ``g ~ c``: evaluated as written,
    ``g`` kept a relative ``1e-16 / sqrt(c)`` of its digits (against mpmath, eps0 = 0.5: the optimum
    was 4e-11 off at ``c = 1e-10``, 9e-6 at ``1e-20``, 92 times too large at ``1e-32``, 2e36 times at
    ``1e-100``). Where ``u <= 1`` the two large terms are cancelled algebraically instead,

        g = c/eps0 + c r_k(eps) + [ln(1 + u) - u],   u = c/eps + c r_k(eps),   r_k(x) = (R_k(x) - x) / x^2,

    with ``r_1(x) = (e^x - 1 - x) / x^2`` from its Taylor series (``x < 2``), ``r_k`` from
    :class:`_Density`, and ``ln(1 + u) - u = 2 atanh(s) - 2s - u s``, ``s = u / (2 + u)`` (no
    cancellation for ``0 <= u <= 1``). Where ``u > 1`` the form ``ln(1 + u) - (c/eps)(eps0 - eps)/eps0``
    is used, with ``ln u`` in logarithms when ``u`` would overflow. For ``c < 2^-500`` the value is
    scaled by ``2^600`` (``g ~ c`` would be subnormal); an overflowing term is clamped to ``+-1e300``
    (its sign is all that matters there).
    """
    terms = _ratio_terms_one if k == 1 else _Density(k).terms
    shift = 0 if c >= 2.0**-500 else 600
    c_scaled = math.ldexp(c, shift)
    log_c = math.log(c)

    def g(point: float) -> float:
        eps = float(point)  # scipy passes numpy scalars, which warn where Python floats go to inf quietly
        log_v, r = terms(eps)  # ln(R_k / eps^2), and r_k (NaN above 700)
        log_u = log_c + log_v
        if log_u <= 0.0:  # u <= 1 (up to rounding): the cancellation-free form
            if eps <= 700.0:
                c_r = c_scaled * r
                u_scaled = c_scaled / eps + c_r
            else:  # far from the root (which is below sqrt(c) here): the sign is all that matters
                u_scaled = math.ldexp(math.exp(log_u), shift)
                c_r = u_scaled - c_scaled / eps
            u = math.ldexp(u_scaled, -shift)
            s = u / (2.0 + u)
            # ln(1 + u) - u = 2 (atanh(s) - s) - u s = -u s (1 - 2 s S(s^2) / (2 + u)), atanh(s) - s = s^3 S(s^2)
            log1p_minus_u = -s * u_scaled * (1.0 - 2.0 * s * _horner(_ATANH_COEFFICIENTS, s * s) / (2.0 + u))
            return c_scaled / eps0 + c_r + log1p_minus_u
        if log_u < 700.0 and eps <= 700.0:
            log1p_u = math.log1p(c / eps + c * r)
        else:
            log1p_u = log_u + math.log1p(math.exp(-log_u))
        loss = 0.0 if eps >= eps0 else c / eps * ((eps0 - eps) / eps0)  # c/eps - c/eps0, may overflow to inf
        value = max(-1e300, min(1e300, log1p_u - loss))
        return value if shift == 0 else math.ldexp(max(-1e100, min(1e100, value)), shift)

    return g


def _ratio_terms_one(x: float) -> tuple[float, float]:
    """``(ln((e^x - 1) / x^2), r_1(x))`` for ``x > 0``, ``r_1(x) = (e^x - 1 - x) / x^2`` (NaN above 700)."""
    log_v = x + math.log(-math.expm1(-x)) - 2.0 * math.log(x)
    if x > 700.0:
        return log_v, math.nan
    return log_v, _horner(_R_COEFFICIENTS, x) if x < 2.0 else (math.expm1(x) - x) / x / x


class _Density:
    """``|S_k|``, ``k >= 2``, near the optimum: ``R_k = F_k / f_k = x + x^2 r_k(x)``, ``r_k >= 0`` to full precision.

    With ``f_k(x) = e^-x Q(x)``, ``Q(x) = sum_m W_m x^m / m!`` (``W_m = w_{k-1-m}``, the weight of the
    shape ``m + 1`` in F_k's mixture), integration by parts gives ``F_k(x) - x f_k(x) = -int_0^x t f_k'(t) dt
    = sum_{m=1}^{k-1} d_m (m + 1) P(m + 2, x)`` with ``d_m = W_m - W_{m+1} = W_m m / (2k - m - 2) >= 0``
    (``W_{m+1} / W_m = 2 (k - m - 1) / (2k - m - 2)`` exactly, so ``d_0 = 0``: the density is flat at
    0). Every term is positive, so ``r_k = (F_k - x f_k) / (x^2 f_k)`` has no cancellation, where
    ``R_k - x`` computed as a difference lost everything for small ``x``.
    """

    def __init__(self, k: int) -> None:
        self.k = k
        _, by_index = mixture_weights(k)
        self.W = np.asarray(by_index[::-1], dtype=np.float64)  # W_m, m = 0..k-1
        m = np.arange(k, dtype=np.float64)
        self.m = m
        d = self.W[1:] * m[1:] / (2.0 * k - m[1:] - 2.0)
        self.coefficients = d * (m[1:] + 1.0)  # of P(m + 2, x), m = 1..k-1
        self.shapes = m[1:] + 2.0
        # the series for x < 1e-3: m < 10 and 9 terms of P(a, x) e^x / x^a = sum_n x^n / (a + n)!
        self.series_m = min(k, 10)
        self.series = [[1.0 / math.factorial(mm + 2 + n) for n in range(9)] for mm in range(self.series_m)]

    def r(self, x: float) -> float:
        """``r_k(x) = (R_k(x) - x) / x^2`` for ``0 < x <= 700``."""
        if x < 1e-3:
            top = self.series_m
            q = sum(float(self.W[mm]) * x**mm / math.factorial(mm) for mm in range(top))
            total = 0.0
            for mm in range(1, top):
                coefficient = float(self.coefficients[mm - 1])
                total += coefficient * x ** (mm - 1) * x * sum(t * x**n for n, t in enumerate(self.series[mm]))
            return total / q
        numerator = float(np.sum(self.coefficients * special.gammainc(self.shapes, x)))
        density = float(np.sum(self.W * stats.poisson.pmf(self.m, x)))  # x^m e^-x / m! (Boost)
        return numerator / (x * x * density)

    def terms(self, x: float) -> tuple[float, float]:
        """``(ln(R_k(x) / x^2), r_k(x))`` for ``x > 0`` (``r_k`` NaN above 700, where ``f_k`` underflows)."""
        if x > 700.0:
            log_density = float(special.logsumexp(np.log(self.W) + stats.poisson.logpmf(self.m, x)))
            return math.log(cdf_unchecked(x, self.k)) - log_density - 2.0 * math.log(x), math.nan
        r = self.r(x)
        if x < 1e-3:
            return -math.log(x) + math.log1p(x * r), r  # R / x^2 = 1/x + r, 1/x may overflow
        return math.log(1.0 / x + r), r


@dataclass(frozen=True)
class CostModel:
    """Compensation cost of a breach as a function of the privacy level (validated when built).

    ``E`` (> 0) is the compensation without any privacy guarantee, ``E_min`` (>= 0) the floor,
    ``c`` (> 0) the steepness.

    >>> model = CostModel(550_000.0)
    >>> round(model.cost(1.0), 2)     # 550000 / e
    202333.69
    >>> eps = model.optimal_epsilon(0.5)
    >>> 0 < eps < 0.5 and model.expected_budget(eps, 0.5) < model.cost(0.5)
    True
    """

    E: float
    E_min: float = 0.0
    c: float = 1.0

    def __post_init__(self) -> None:
        check_positive("E", self.E)
        check_positive("E_min", self.E_min, allow_zero=True)
        check_positive("c", self.c)

    def cost(self, epsilon: float) -> float:
        """Returns a **cost**: ``E_min + E e^{-c / epsilon}`` (``E_min`` at ``epsilon = 0``).

        >>> CostModel(100.0, E_min=5.0).cost(0.0)
        5.0
        """
        eps = check_positive("epsilon", epsilon, allow_zero=True, allow_inf=True)
        if eps == 0.0:
            return float(self.E_min)
        return float(self.E_min) + float(self.E) * math.exp(-float(self.c) / eps)

    def _derivative(self, epsilon: float) -> float:
        scaled = math.exp(-float(self.c) / epsilon)
        if scaled == 0.0:  # underflow: E' vanishes faster than any power of epsilon
            return 0.0
        return float(self.E) * scaled * float(self.c) / epsilon / epsilon

    def expected_budget(self, epsilon: float, epsilon0: float, dimension: int = 1) -> float:
        """Returns a **budget**: ``c_k(eps) E_eps + (1 - c_k(eps)) E_eps0`` (paper, Sec. 5).

        Uses the confidence of :func:`dpkit.risk.laplace_confidence` (``k = dimension``). An
        ``epsilon`` above ``epsilon0`` is read as ``epsilon0`` (the mechanism is ``epsilon0``-DP, so
        the budget is ``E_eps0``, not ``E_eps`` of the larger epsilon).

        >>> model = CostModel(550_000.0)
        >>> model.expected_budget(0.5, 0.5) == model.cost(0.5)
        True
        """
        eps0 = check_epsilon(epsilon0, "epsilon0")
        eps = min(check_positive("epsilon", epsilon, allow_zero=True, allow_inf=True), eps0)
        k = check_dimension(dimension)
        confidence, risk = confidence_unchecked(eps, eps0, k), risk_unchecked(eps, eps0, k)
        # E_min + E [c e^(-c/eps) + (1 - c) e^(-c/eps0)]: the bracket is in [0, 1], so nothing overflows
        # unless the budget itself exceeds the float range (then inf, a budget rounded up; E_min + E
        # times 0 * inf was NaN)
        scaled = 0.0 if eps == 0.0 else math.exp(-float(self.c) / eps)
        bracket = confidence * scaled + risk * math.exp(-float(self.c) / eps0)
        return float(self.E_min) + float(self.E) * bracket

    def optimal_epsilon(self, epsilon0: float, dimension: int = 1) -> float:
        """Returns an **epsilon**: the unique minimiser of :meth:`expected_budget` on ``(0, epsilon0]``.

        Proof of existence and uniqueness (``k = 1``). With ``c_1 = (1 - e^-eps)/(1 - e^-eps0)``,
        ``B'(eps) = c_1'(eps) h(eps)`` where ``c_1' > 0`` and

            h(eps) = (e^eps - 1) E'(eps) + E(eps) - E(eps0)      (as c_1 / c_1' = e^eps - 1).

        ``h(0+) = E_min - E(eps0) < 0`` and ``h(eps0) = (e^eps0 - 1) E'(eps0) > 0``; and
        ``h'(eps) = E'(eps) [e^eps + 1 + (e^eps - 1)(c - 2 eps) / eps^2]``, where
        ``E''/E' = (c - 2 eps) / eps^2 > -2 / eps``, so the bracket exceeds
        ``e^eps + 1 - 2 (e^eps - 1) / eps > 0`` (that is ``eps > 2 tanh(eps / 2)``). So ``h`` is
        strictly increasing, ``B`` decreases then increases, and the root of ``h`` found by
        bracketing (Brent) on ``(0, eps0)`` is the unique minimiser, for every ``E, E_min, c``.
        For ``k > 1`` (uniqueness not proved here) ``B' = c_k' h`` in the same way with ``F_k / f_k`` in
        place of ``e^eps - 1``; every local minimum (a sign change of ``h``) on a grid of step 0.25 in
        ``log eps``, from ``e^-60 min(eps0, c)`` to ``eps0``, is located by bracketing, and the one of
        least budget is returned. Both are checked against mpmath to float rounding, ``c`` from 1e-300
        to 1e300.

        >>> round(CostModel(550_000.0).optimal_epsilon(0.5), 4)
        0.2741
        """
        eps0 = check_epsilon(epsilon0, "epsilon0")
        k = check_dimension(dimension)
        if k == 1:
            # h has the sign of g = ln(1 + h / (E e^(-c/eps0))) = c/eps0 - c/eps + ln(1 + (e^eps - 1) c/eps^2),
            # which neither underflows (e^(-c/eps) for small eps or large c) nor overflows (e^eps);
            # _optimum_sign evaluates it without cancellation (see there)
            g = _optimum_sign(float(self.c), eps0, 1)
            high, low = eps0, eps0 / 2
            if low == 0.0:  # eps0 is the least positive float, the only candidate in (0, eps0]
                return eps0
            while g(low) >= 0:  # g -> -inf as eps -> 0: at most ~2100 halvings
                if low <= math.ulp(0.0):  # the root is below the least positive float: it is the answer
                    return low
                high, low = low, low / 2
            root = float(optimize.brentq(g, low, high, xtol=2.0**-1022, rtol=4 * 2.0**-52, maxiter=500))
            return _polish_root(g, root, low, high)
        # k > 1 (uniqueness not proved): every sign change from - to + of g (a local minimum of B) on a
        # grid of step 0.25 in log(eps), from e^-60 below both eps0 and c (where g < 0) up to eps0,
        # located to float rounding like k = 1, and the one of least budget kept. (The least budget on
        # a grid refined by bounded minimisation was 1e-8 to 1e-3 off for c from 1 to 1e-20, and
        # returned 0.0 or 1e-284 instead of 5e-151 for c = 1e-300: B is flat to float precision there.)
        c = float(self.c)
        g = _optimum_sign(c, eps0, k)
        least = math.ulp(0.0)
        top = math.log(eps0)
        bottom = min(top, max(min(top, math.log(c)) - 60.0, math.log(least) + 1.0))
        logs = np.linspace(bottom, top, int(math.ceil((top - bottom) / 0.25)) + 1)
        grid = sorted({min(eps0, max(least, math.exp(float(u)))) for u in logs} | {eps0})
        values = [g(e) for e in grid]
        while values[0] >= 0 and grid[0] > least:  # g -> -inf as eps -> 0
            grid.insert(0, max(least, grid[0] / 2))
            values.insert(0, g(grid[0]))
        candidates = [grid[0]] if values[0] >= 0 else []  # the root is below the least positive float
        for i in range(len(grid) - 1):
            if values[i] < 0 <= values[i + 1]:
                low, high = grid[i], grid[i + 1]
                root = float(optimize.brentq(g, low, high, xtol=2.0**-1022, rtol=4 * 2.0**-52, maxiter=500))
                candidates.append(_polish_root(g, root, low, high))
        if values[-1] < 0:  # B still decreasing at eps0 (rounding): eps0 is a local minimum
            candidates.append(eps0)
        if len(candidates) == 1:
            return candidates[0]
        drop = _budget_drop(c, eps0, k)
        return min(candidates, key=drop)


def _budget_drop(c: float, eps0: float, k: int) -> Callable[[float], float]:
    """``eps -> (B(eps) - B(eps0)) 2^p / (E e^(-c/eps0)) = c_k(eps) (e^(c/eps0 - c/eps) - 1) 2^p``, for ``eps > 0``.

    A positive multiple of ``B(eps) - B(eps0)`` (so it has the same minimisers) that neither rounds to
    a constant nor underflows: ``B`` itself is flat to float precision where ``c / eps`` is below
    ``1e-16`` (the optimum for ``c = 1e-300`` is near ``1e-150``), and ``e^(-c/eps0)`` may underflow.
    ``p = 600`` for ``c < 2^-500`` (else 0) keeps the values off the subnormal range.
    """
    shift = 0 if c >= 2.0**-500 else 600
    c_scaled = math.ldexp(c, shift)

    def drop(point: float) -> float:
        eps = float(point)  # scipy passes numpy scalars, which warn where Python floats go to inf quietly
        confidence = confidence_unchecked(eps, eps0, k)
        y = -((eps0 - eps) / eps0) / eps  # 1/eps0 - 1/eps, may be -inf
        x_scaled = c_scaled * y  # (c/eps0 - c/eps) 2^p
        x = math.ldexp(x_scaled, -shift) if math.isfinite(x_scaled) else x_scaled
        if abs(x) <= 0.5:  # e^x - 1 = x (e^x - 1) / x, the factor x kept scaled
            return confidence * x_scaled * (1.0 if x == 0.0 else math.expm1(x) / x)
        return confidence * math.ldexp(math.expm1(x), shift)

    return drop


def _polish_root(g: Callable[[float], float], root: float, low: float, high: float) -> float:
    """The float nearest the root of the increasing ``g`` (``g(low) < 0 <= g(high)``), from Brent's estimate.

    Brent's ``rtol`` is at least 4 ulps (and its ``xtol`` is absolute): bracket the sign change of
    ``g`` between adjacent floats (steps doubling from one ulp away from ``root``), then keep the
    end where ``|g|`` is smaller.
    """
    if g(root) < 0:
        below, above, step = root, high, math.ulp(root)
        while below + step < high and g(below + step) < 0:
            below, step = below + step, 2 * step
        above = min(high, below + step)
    else:
        below, above, step = low, root, math.ulp(root)
        while above - step > low and g(above - step) >= 0:
            above, step = above - step, 2 * step
        below = max(low, above - step)
    below, above = bisect_floats(lambda x: g(x) < 0, below, above)  # g(below) < 0 <= g(above)
    return below if abs(g(below)) < abs(g(above)) else above
