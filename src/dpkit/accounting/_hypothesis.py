"""The hypothesis-testing view of differential privacy (Sarwate, Calmon, Kosut & Sankar 2024).

A mechanism run on one of two neighbouring datasets is a binary hypothesis test
``H0: Y ~ P`` (dataset D) against ``H1: Y ~ Q`` (dataset D'). Everything here is a function of
that pair:

* the privacy profile ``delta(epsilon)``: the hockey-stick divergence
  ``E_{e^eps}(P || Q) = E_Q[(dP/dQ - e^eps)^+]`` (Balle, Barthe & Gaboardi 2018, Thm. 1);
* the trade-off curve ``beta(alpha)``: the type-II error of the most powerful level-alpha test
  (Dong, Roth & Su 2022, "Gaussian differential privacy", Def. 2.1);
* the (epsilon, delta) region ``P_FA + e^eps P_MD >= 1 - delta`` (Kairouz, Oh & Viswanath 2015);
* KL, Renyi and max divergences, and the bounds a pure epsilon-DP pair puts on its KL divergence.

Pairs of distributions on a common finite support are given as two arrays of probabilities.
Continuous mechanisms have closed forms: the Gaussian through its GDP parameter
``mu = sensitivity / sigma`` and the Laplace mechanism through its scale ``b`` (sensitivity 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit._errors import InvalidParameterError
from dpkit._lazy import LazyModule
from dpkit._validation import check_delta, check_positive
from dpkit.accounting._rdp import laplace_rdp
from dpkit.events import GaussianEvent, LaplaceEvent
from dpkit.mechanisms.gaussian import _balle_wang_delta

optimize = LazyModule("scipy.optimize")
special = LazyModule("scipy.special")
mpmath = LazyModule("mpmath")

__all__ = [
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_kl",
    "gaussian_renyi",
    "gaussian_tradeoff",
    "hockey_stick",
    "kl_bound_pure",
    "kl_bound_pure_tight",
    "kl_divergence",
    "laplace_delta",
    "laplace_kl",
    "laplace_renyi",
    "laplace_tradeoff",
    "max_divergence",
    "privacy_profile",
    "renyi_divergence",
    "satisfies_region",
    "tradeoff_from_epsilon_delta",
    "tradeoff_from_pair",
    "tradeoff_from_profile",
]

FloatArray = NDArray[np.float64]

# A pair's probabilities must sum to one within this tolerance.
_SUM_TOLERANCE = 1e-9


# -- input checks ---------------------------------------------------------------------------------


def _check_distribution(name: str, value: Any) -> FloatArray:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(name, value, "must be a 1-D array of probabilities") from exc
    if array.ndim != 1 or array.size == 0:
        raise InvalidParameterError(name, value, "must be a non-empty 1-D array of probabilities")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise InvalidParameterError(name, value, "must contain finite probabilities >= 0")
    if abs(float(array.sum()) - 1.0) > _SUM_TOLERANCE:
        raise InvalidParameterError(name, value, f"must sum to 1 (within {_SUM_TOLERANCE})")
    return array


def _check_pair(p: Any, q: Any) -> tuple[FloatArray, FloatArray]:
    p_array = _check_distribution("p", p)
    q_array = _check_distribution("q", q)
    if p_array.shape != q_array.shape:
        raise InvalidParameterError("q", q, f"must have the same length as p ({p_array.size})")
    return p_array, q_array


def _check_reals(name: str, value: Any, *, low: float, high: float, closed_high: bool = True) -> FloatArray:
    """Array of finite reals in [low, high] (or [low, high)); scalars become 0-d arrays."""
    allowed = f"must be real numbers in [{low}, {high}{']' if closed_high else ')'}"
    if isinstance(value, bool | np.bool_):
        raise InvalidParameterError(name, value, allowed)
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(name, value, allowed) from exc
    if array.dtype == object or np.any(np.isnan(array)) or np.any(array < low):
        raise InvalidParameterError(name, value, allowed)
    if np.any(array > high) or (not closed_high and np.any(array >= high)):
        raise InvalidParameterError(name, value, allowed)
    return array


def _check_epsilons(value: Any) -> FloatArray:
    array = _check_reals("epsilon", value, low=0.0, high=math.inf, closed_high=False)
    return array


def _check_alphas(value: Any) -> FloatArray:
    return _check_reals("alpha", value, low=0.0, high=1.0)


def _out(array: FloatArray) -> Any:
    """A scalar for scalar input, an array otherwise."""
    return float(array) if array.ndim == 0 else array


# -- privacy profiles: delta(epsilon) -------------------------------------------------------------


def hockey_stick(p: ArrayLike, q: ArrayLike, epsilon: float) -> float:
    """The hockey-stick divergence ``E_{e^eps}(P || Q) = sum_y (P(y) - e^eps Q(y))^+``, exactly.

    It is the smallest delta for which the ordered pair (P, Q) satisfies
    ``P(S) <= e^eps Q(S) + delta`` for every event S (Balle, Barthe & Gaboardi 2018).

    >>> hockey_stick([0.75, 0.25], [0.25, 0.75], 0.0)
    0.5
    """
    p_array, q_array = _check_pair(p, q)
    eps = check_positive("epsilon", epsilon, allow_zero=True)
    return float(np.sum(np.maximum(p_array - math.exp(eps) * q_array, 0.0)))


def gaussian_delta(mu: float, epsilon: ArrayLike) -> Any:
    """delta(epsilon) of mu-GDP, i.e. of the Gaussian mechanism with ``mu = sensitivity / sigma``.

    ``delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` (Dong, Roth & Su 2022,
    Cor. 2.13; Balle & Wang 2018, Thm. 8), evaluated with mpmath: the two terms cancel to
    within a factor ``mu`` (or ``mu^2 / eps`` in the tail), which in double precision cost up to
    7 digits, and tiny deltas keep their relative precision.

    >>> round(gaussian_delta(1.0, 1.0), 4)
    0.1269
    """
    m = check_positive("mu", mu)
    eps = _check_epsilons(epsilon)
    delta = np.array([float(_mp_gaussian_delta(m, float(e))) for e in eps.ravel()], dtype=np.float64)
    return _out(delta.reshape(eps.shape))


# Working precision of the profile: the two terms agree to about log10(1/(mu |gap|)) digits, so
# double precision lost up to 7 digits for small mu (mu = 1e-9 at eps = 0) or far in the tail.
_GAUSSIAN_DPS = 60


def _mp_gaussian_delta(mu: float, epsilon: float) -> Any:
    """delta(epsilon) of mu-GDP as an mpmath number at ``_GAUSSIAN_DPS`` digits (no underflow):
    the Gaussian mechanism's profile with sigma = 1 and sensitivity mu."""
    return _balle_wang_delta(1.0, mu, epsilon, _GAUSSIAN_DPS + max(0, int(-math.log10(mu))))


def _log_gaussian_delta(mu: float, epsilon: float) -> float:
    value = _mp_gaussian_delta(mu, epsilon)
    return -math.inf if value <= 0 else float(mpmath.log(value))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest epsilon with ``gaussian_delta(mu, epsilon) <= delta`` (root of the log profile).

    Returns ``inf`` for ``delta = 0`` (no finite epsilon is 0-DP for a Gaussian).

    >>> eps = gaussian_epsilon(1.0, 1e-5)
    >>> abs(gaussian_delta(1.0, eps) - 1e-5) < 1e-12
    True
    """
    m = check_positive("mu", mu)
    target = check_delta(delta)
    if target == 0.0:
        return math.inf
    if gaussian_delta(m, 0.0) <= target:
        return 0.0
    log_target = math.log(target)
    high = max(1.0, m * m)
    while _log_gaussian_delta(m, high) > log_target:
        high *= 2.0
    root = float(optimize.brentq(lambda e: _log_gaussian_delta(m, e) - log_target, 0.0, high, xtol=1e-14, rtol=1e-14))
    # brentq lands within its tolerance on *either* side of the root; step up until the
    # high-precision profile confirms the answer (an epsilon below the root would not be DP).
    step = max(root * 1e-15, 1e-300)
    while _mp_gaussian_delta(m, root) > target:
        root += step
        step *= 2.0
    return root


def laplace_delta(b: float, epsilon: ArrayLike) -> Any:
    """delta(epsilon) of the Laplace mechanism of scale ``b`` on a sensitivity-1 query.

    With P = Lap(0, b), Q = Lap(1, b) the privacy loss ``log p/q`` exceeds eps exactly on
    ``y < y* = (1 - b eps) / 2``, so ``delta = P(Y < y*) - e^eps Q(Y < y*) = 1 - e^{(eps - 1/b)/2}``
    for ``eps < 1/b`` and 0 beyond (the mechanism is (1/b)-DP). Symmetric in P and Q.

    >>> laplace_delta(1.0, 1.0)
    0.0
    >>> round(laplace_delta(1.0, 0.0), 6)
    0.393469
    """
    scale = check_positive("b", b)
    eps = _check_epsilons(epsilon)
    return _out(np.maximum(-np.expm1(np.minimum(eps - 1.0 / scale, 0.0) / 2.0), 0.0))


def privacy_profile(source: Any, epsilons: ArrayLike, *, symmetric: bool = True) -> FloatArray:
    """delta(epsilon) at each epsilon for a pair of distributions, an event or an accountant.

    ``source`` may be

    * a pair ``(p, q)`` of probability arrays on a common finite support: the hockey-stick
      divergence ``E_{e^eps}(P || Q)``, maximised with ``E_{e^eps}(Q || P)`` when ``symmetric``
      (DP quantifies over both orders of the neighbours);
    * a :class:`~dpkit.events.GaussianEvent` or :class:`~dpkit.events.LaplaceEvent`: their
      closed forms;
    * anything with a ``delta(epsilon)`` method, such as an accountant with composed events.

    >>> privacy_profile(([0.75, 0.25], [0.25, 0.75]), [0.0, math.log(3)]).tolist()
    [0.5, 0.0]
    """
    eps = np.atleast_1d(_check_epsilons(epsilons))
    if isinstance(source, GaussianEvent):
        return np.asarray(gaussian_delta(1.0 / source.noise_multiplier, eps), dtype=np.float64)
    if isinstance(source, LaplaceEvent):
        return np.asarray(laplace_delta(source.noise_multiplier, eps), dtype=np.float64)
    if isinstance(source, tuple | list) and len(source) == 2:
        p_array, q_array = _check_pair(source[0], source[1])
        scales = np.exp(eps)[:, None]
        forward: FloatArray = np.maximum(p_array[None, :] - scales * q_array[None, :], 0.0).sum(axis=1)
        if not symmetric:
            return forward
        backward: FloatArray = np.maximum(q_array[None, :] - scales * p_array[None, :], 0.0).sum(axis=1)
        return np.maximum(forward, backward)
    if callable(getattr(source, "delta", None)):
        return np.array([float(source.delta(float(e))) for e in eps])
    raise InvalidParameterError(
        "source", source, "must be a pair (p, q), a GaussianEvent, a LaplaceEvent or have a delta(epsilon) method"
    )


# -- trade-off curves: beta(alpha) ----------------------------------------------------------------


def gaussian_tradeoff(mu: float, alpha: ArrayLike) -> Any:
    """Trade-off curve of mu-GDP: ``G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu)`` (DRS 2022, eq. 2.2).

    Uses ``Phi^{-1}(1 - alpha) = -Phi^{-1}(alpha)`` so that small alphas stay accurate.

    >>> round(gaussian_tradeoff(1.0, 0.05), 4)
    0.7405
    """
    m = check_positive("mu", mu, allow_zero=True)
    alphas = _check_alphas(alpha)
    return _out(np.asarray(special.ndtr(-special.ndtri(alphas) - m), dtype=np.float64))


def _laplace_cdf(x: FloatArray, b: float) -> FloatArray:
    negative = 0.5 * np.exp(np.minimum(x, 0.0) / b)
    positive = 1.0 - 0.5 * np.exp(-np.maximum(x, 0.0) / b)
    return np.where(x < 0, negative, positive)


def laplace_tradeoff(b: float, alpha: ArrayLike) -> Any:
    """Trade-off curve of the Laplace mechanism of scale ``b`` (sensitivity 1).

    The likelihood ratio of Lap(1, b) to Lap(0, b) is non-decreasing in y, so thresholds
    ``y > c`` are most powerful: ``beta(alpha) = F(F^{-1}(1 - alpha) - 1)`` with F the
    Lap(0, b) CDF (Dong, Roth & Su 2022, Example in Sec. 2.2, with eps = 1/b).

    >>> round(laplace_tradeoff(1.0, 0.5), 6)
    0.18394
    """
    scale = check_positive("b", b)
    alphas = _check_alphas(alpha)
    with np.errstate(divide="ignore"):
        # F^{-1}(1 - alpha): b log(2(1 - alpha)) for alpha > 1/2, -b log(2 alpha) otherwise.
        threshold = np.where(
            alphas > 0.5, scale * np.log(2.0 * np.maximum(1.0 - alphas, 0.0)), -scale * np.log(2.0 * alphas)
        )
    return _out(_laplace_cdf(threshold - 1.0, scale))


def tradeoff_from_epsilon_delta(epsilon: float, delta: float, alpha: ArrayLike) -> Any:
    """The trade-off curve of (epsilon, delta)-DP: ``max(0, 1 - delta - e^eps a, e^-eps (1 - delta - a))``.

    Every (epsilon, delta)-DP mechanism has a trade-off curve at least this one
    (Wasserman & Zhou 2010; Kairouz, Oh & Viswanath 2015; DRS 2022, Prop. 2.5).

    >>> tradeoff_from_epsilon_delta(0.0, 0.0, 0.3)
    0.7
    """
    eps = check_positive("epsilon", epsilon, allow_zero=True)
    dlt = check_delta(delta)
    alphas = _check_alphas(alpha)
    beta = np.maximum.reduce(
        [np.zeros_like(alphas), 1.0 - dlt - math.exp(eps) * alphas, math.exp(-eps) * (1.0 - dlt - alphas)]
    )
    return _out(beta)


def tradeoff_from_profile(
    epsilons: Sequence[float] | ArrayLike, deltas: Sequence[float] | ArrayLike, alpha: ArrayLike
) -> Any:
    """The trade-off curve implied by a privacy profile: the upper envelope over its (eps, delta(eps)).

    A mechanism that is (eps_i, delta_i)-DP for every i has ``beta >= sup_i f_{eps_i, delta_i}``;
    with the full profile this recovers the mechanism's symmetrised trade-off curve (DRS 2022,
    Prop. 2.12, the convex-conjugate duality between f and delta(eps)).

    >>> eps = np.linspace(0, 5, 200)
    >>> beta = tradeoff_from_profile(eps, gaussian_delta(1.0, eps), 0.05)
    >>> bool(abs(beta - gaussian_tradeoff(1.0, 0.05)) < 1e-3)
    True
    """
    eps = np.atleast_1d(_check_epsilons(epsilons))
    dlt = np.atleast_1d(_check_reals("deltas", deltas, low=0.0, high=1.0))
    if eps.ndim != 1 or eps.shape != dlt.shape:
        raise InvalidParameterError("deltas", deltas, f"must have one delta per epsilon ({eps.size})")
    alphas = _check_alphas(alpha)
    flat = np.atleast_1d(alphas)[None, :]
    scale = np.exp(eps)[:, None]
    first = 1.0 - dlt[:, None] - scale * flat
    second = (1.0 - dlt[:, None] - flat) / scale
    beta = np.maximum(np.maximum(first, second).max(axis=0), 0.0)
    return float(beta[0]) if alphas.ndim == 0 else beta.reshape(alphas.shape)


def tradeoff_from_pair(p: ArrayLike, q: ArrayLike, alpha: ArrayLike) -> Any:
    """The exact trade-off curve ``T(P, Q)`` of a pair on a finite support (Neyman-Pearson).

    The most powerful test rejects H0 (Y ~ P) on the outcomes where ``q/p`` is largest and
    randomises on the boundary outcome, so ``beta(alpha)`` is the piecewise-linear curve through
    ``(P(reject), 1 - Q(reject))`` as outcomes are added in decreasing order of ``q/p``.

    >>> tradeoff_from_pair([0.75, 0.25], [0.25, 0.75], [0.0, 0.25, 1.0]).tolist()
    [1.0, 0.25, 0.0]
    """
    p_array, q_array = _check_pair(p, q)
    alphas = _check_alphas(alpha)
    only_q = p_array == 0
    rest = ~only_q
    p_rest, q_rest = p_array[rest], q_array[rest]
    order = np.argsort(-(q_rest / p_rest), kind="stable")
    type_one = np.concatenate([[0.0], np.cumsum(p_rest[order])])
    type_two = 1.0 - float(q_array[only_q].sum()) - np.concatenate([[0.0], np.cumsum(q_rest[order])])
    type_one[-1] = max(type_one[-1], 1.0)  # absorb rounding so that alpha = 1 is covered
    beta = np.maximum(np.interp(alphas, type_one, type_two), 0.0)
    return _out(np.asarray(beta, dtype=np.float64))


# -- the (epsilon, delta) region ------------------------------------------------------------------


def satisfies_region(p_false_alarm: ArrayLike, p_missed_detection: ArrayLike, epsilon: float, delta: float) -> Any:
    """Whether an operating point lies in the (epsilon, delta)-DP region of every test.

    A mechanism is (epsilon, delta)-DP iff every test between neighbours has
    ``P_FA + e^eps P_MD >= 1 - delta`` and ``e^eps P_FA + P_MD >= 1 - delta``
    (Kairouz, Oh & Viswanath 2015, Thm. 2.1). A point outside the region is evidence of a
    violation; a small slack (1e-12) absorbs rounding.

    >>> satisfies_region(0.05, 0.9, 1.0, 0.0)
    True
    >>> satisfies_region(0.05, 0.5, 1.0, 0.0)
    False
    """
    eps = check_positive("epsilon", epsilon, allow_zero=True)
    dlt = check_delta(delta)
    false_alarm = _check_reals("p_false_alarm", p_false_alarm, low=0.0, high=1.0)
    missed = _check_reals("p_missed_detection", p_missed_detection, low=0.0, high=1.0)
    scale = math.exp(eps)
    slack = 1e-12
    ok = (false_alarm + scale * missed >= 1.0 - dlt - slack) & (scale * false_alarm + missed >= 1.0 - dlt - slack)
    return bool(ok) if ok.ndim == 0 else ok


# -- divergences ----------------------------------------------------------------------------------


def kl_divergence(p: ArrayLike, q: ArrayLike) -> float:
    """``D_KL(P || Q) = sum p log(p/q)`` in nats; ``inf`` when P is not absolutely continuous w.r.t. Q.

    It is the mean of the privacy loss under P (Sarwate et al. 2024, Sec. 3).

    >>> round(kl_divergence([0.75, 0.25], [0.25, 0.75]), 6)
    0.549306
    """
    p_array, q_array = _check_pair(p, q)
    support = p_array > 0
    if np.any(q_array[support] == 0):
        return math.inf
    return float(max(np.sum(p_array[support] * np.log(p_array[support] / q_array[support])), 0.0))


def max_divergence(p: ArrayLike, q: ArrayLike) -> float:
    """``D_inf(P || Q) = max_y log P(y)/Q(y)`` over the support of P: the pure-DP epsilon of (P, Q).

    >>> round(max_divergence([0.75, 0.25], [0.25, 0.75]), 6)
    1.098612
    """
    p_array, q_array = _check_pair(p, q)
    support = p_array > 0
    if np.any(q_array[support] == 0):
        return math.inf
    return float(np.max(np.log(p_array[support] / q_array[support])))


def renyi_divergence(p: ArrayLike, q: ArrayLike, alpha: float) -> float:
    """Renyi divergence of order alpha: ``log(sum p^alpha q^(1-alpha)) / (alpha - 1)`` (Mironov 2017).

    ``alpha = 1`` is the KL divergence and ``alpha = inf`` the max divergence.

    >>> p, q = [0.75, 0.25], [0.25, 0.75]
    >>> renyi_divergence(p, q, 1) == kl_divergence(p, q)
    True
    """
    order = check_positive("alpha", alpha, allow_inf=True)
    if order == 1.0:
        return kl_divergence(p, q)
    if math.isinf(order):
        return max_divergence(p, q)
    p_array, q_array = _check_pair(p, q)
    support = (p_array > 0) & (q_array > 0)
    if order > 1 and np.any((p_array > 0) & (q_array == 0)):
        return math.inf
    # log-sum-exp of alpha log p + (1 - alpha) log q, for stability at large alpha.
    terms = order * np.log(p_array[support]) + (1.0 - order) * np.log(q_array[support])
    if terms.size == 0:
        return math.inf
    return float(max(special.logsumexp(terms) / (order - 1.0), 0.0))


def gaussian_kl(mu: float) -> float:
    """KL divergence of the Gaussian mechanism, ``D_KL(N(0,1) || N(mu,1)) = mu^2 / 2``.

    >>> gaussian_kl(2.0)
    2.0
    """
    m = check_positive("mu", mu, allow_zero=True)
    return m * m / 2.0


def gaussian_renyi(mu: float, alpha: float) -> float:
    """Renyi divergence of the Gaussian mechanism: ``alpha mu^2 / 2`` (Mironov 2017, Prop. 7).

    >>> gaussian_renyi(1.0, 4.0)
    2.0
    """
    m = check_positive("mu", mu, allow_zero=True)
    order = check_positive("alpha", alpha)
    return order * m * m / 2.0


def laplace_kl(b: float) -> float:
    """KL divergence of the Laplace mechanism (scale b, sensitivity 1): ``1/b + e^{-1/b} - 1``.

    >>> round(laplace_kl(1.0), 6)
    0.367879
    """
    scale = check_positive("b", b)
    return 1.0 / scale + math.expm1(-1.0 / scale)


def laplace_renyi(b: float, alpha: float) -> float:
    """Renyi divergence of the Laplace mechanism (Mironov 2017, Table II), any order alpha > 0.

    ``log(alpha/(2 alpha - 1) e^{(alpha-1)/b} + (alpha-1)/(2 alpha - 1) e^{-alpha/b}) / (alpha - 1)``
    for alpha > 1 (and alpha != 1/2 below 1); ``alpha = 1`` is :func:`laplace_kl`, ``inf`` is 1/b.

    >>> round(laplace_renyi(1.0, 2.0), 4)
    0.6191
    """
    scale = check_positive("b", b)
    order = check_positive("alpha", alpha, allow_inf=True)
    if math.isinf(order):
        return 1.0 / scale
    if order == 1.0:
        return laplace_kl(scale)
    if order == 0.5:
        # Limit of the general formula: Bhattacharyya form, computed by direct integration.
        # int sqrt(p q) = e^{-1/(2b)} (1 + 1/(2b)).
        return -2.0 * (-1.0 / (2.0 * scale) + math.log1p(1.0 / (2.0 * scale)))
    if order > 1.0:
        # The cancellation-free form of dpkit.accounting._rdp.laplace_rdp (rounded up by ~1e-13):
        # eps + log1p(...)/(alpha-1) fell below the exact value for a large b (6e-3 low at b = 1e14).
        return float(laplace_rdp(scale, np.array([order], dtype=np.float64))[0])
    first = order / (2.0 * order - 1.0) * math.exp((order - 1.0) / scale)
    second = (order - 1.0) / (2.0 * order - 1.0) * math.exp(-order / scale)
    return math.log(first + second) / (order - 1.0)


def kl_bound_pure(epsilon: float) -> float:
    """``epsilon (e^epsilon - 1)``: a bound on the KL divergence of any epsilon-DP pair.

    Dwork, Rothblum & Vadhan 2010 (Lemma III.2); seed 003. See :func:`kl_bound_pure_tight`.

    >>> round(kl_bound_pure(1.0), 6)
    1.718282
    """
    eps = check_positive("epsilon", epsilon, allow_zero=True)
    return eps * math.expm1(eps)


def kl_bound_pure_tight(epsilon: float) -> float:
    """``epsilon tanh(epsilon / 2) = epsilon (e^eps - 1)/(e^eps + 1)``: the largest KL of an eps-DP pair.

    Attained by binary randomized response; at most ``epsilon^2 / 2`` (Bun & Steinke 2016,
    Prop. 3.3, whose proof gives this bound) and below :func:`kl_bound_pure`.

    >>> kl_bound_pure_tight(1.0) < kl_bound_pure(1.0)
    True
    """
    eps = check_positive("epsilon", epsilon, allow_zero=True)
    return eps * math.tanh(eps / 2.0)
