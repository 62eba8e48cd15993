"""Fast approximate accountants: Gaussian DP / central limit (Dong, Roth & Su) and the saddle point.

**Neither is a certified bound once a subsampled event is composed.** The GDP accountant is
exact for plain Gaussian noise (``certified`` stays True), but its central-limit treatment of
subsampled Gaussians can *under*-estimate epsilon; the saddle-point accountant is an asymptotic
approximation throughout. Use them to explore and to cross-check; release with a certified
accountant (PLD pessimistic, RDP).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from dpkit._lazy import LazyModule
from dpkit.accounting._base import PrivacyAccountant, inverse_square
from dpkit.accounting._hypothesis import gaussian_delta, gaussian_epsilon
from dpkit.events import (
    GaussianEvent,
    GroupEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    SampledWithoutReplacementEvent,
)
from dpkit.guarantees import NeighbourRelation

optimize = LazyModule("scipy.optimize")

__all__ = ["GDPAccountant", "SaddlePointAccountant"]


def _plain_gaussian(event: PrivacyEvent, neighbours: NeighbourRelation) -> GaussianEvent | None:
    if isinstance(event, GaussianEvent) and event.neighbours is neighbours:
        return event
    return None


class GDPAccountant(PrivacyAccountant):
    """Gaussian differential privacy: every event is summarised by one number mu, composed as a norm.

    * A Gaussian of noise multiplier sigma is exactly ``mu = 1/sigma``-GDP and mu-GDP composes to
      ``sqrt(sum mu_i^2)``-GDP with equality (Dong, Roth & Su 2022, Cor. 3.3): with only Gaussian
      events (and groups of them, DRS Thm. 2.14: k mu) the answers are exact, ``certified = True``.
    * A subsampled Gaussian of rate q, repeated T times, is given by the central limit theorem
      ``mu = q sqrt(T (e^{1/sigma^2} - 1))`` (DRS 2022, Thm. 5 / Cor. 5.4; Bu, Dong, Long & Su 2020
      for Poisson sampling). This is a *limit* as T -> infinity and it can under-estimate epsilon
      at finite T: once such an event is composed ``certified`` becomes False. **Never use it as a
      certified bound.** Poisson sampling is read under add/remove neighbours, sampling without
      replacement under replace-one, as in those papers.
    * Pure or approximate DP, Laplace, zCDP... are not mu-GDP with equality for any finite mu and
      are refused (:class:`~dpkit._errors.UnsupportedEventError`), leaving the state unchanged.

    >>> from dpkit.events import GaussianEvent
    >>> accountant = GDPAccountant().compose(GaussianEvent(2.0), count=4)
    >>> accountant.mu, accountant.certified
    (1.0, True)
    >>> round(accountant.delta(1.0), 4)
    0.1269
    """

    def __init__(self, neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE) -> None:
        super().__init__(neighbours)
        self._mu_squared = 0.0
        self.certified = True

    @property
    def mu(self) -> float:
        """The GDP parameter of everything composed so far (0 with no events)."""
        return math.sqrt(self._mu_squared)

    def _supports_atomic(self, event: PrivacyEvent) -> bool:
        return self._mu_squared_of(event) is not None

    def _mu_squared_of(self, event: PrivacyEvent) -> tuple[float, bool] | None:
        """(mu^2 of one run, exact?) or None when the event is not supported."""
        gaussian = _plain_gaussian(event, self.neighbours)
        if gaussian is not None:
            return inverse_square(gaussian.noise_multiplier), True
        if isinstance(event, GroupEvent):
            inner = _plain_gaussian(event.event, self.neighbours)
            if inner is not None:
                return inverse_square(inner.noise_multiplier / event.size), True
            return None
        rate: float | None = None
        inner = None
        if isinstance(event, PoissonSampledEvent) and self.neighbours is NeighbourRelation.ADD_REMOVE:
            rate, inner = event.sampling_probability, _plain_gaussian(event.event, self.neighbours)
        elif isinstance(event, SampledWithoutReplacementEvent) and self.neighbours is NeighbourRelation.REPLACE_ONE:
            rate, inner = event.sample_size / event.source_size, _plain_gaussian(event.event, self.neighbours)
        if rate is None or inner is None:
            return None
        if rate == 1.0:
            return inverse_square(inner.noise_multiplier), True
        # CLT (DRS 2022, Thm. 5): T steps contribute q^2 T (e^{1/sigma^2} - 1) to mu^2 (inf once
        # e^{1/sigma^2} overflows, below sigma ~ 0.0376: no privacy to speak of).
        exponent = inverse_square(inner.noise_multiplier)
        return (rate * rate * math.expm1(exponent) if exponent < 709.0 else math.inf), False

    def _compose_atomic(self, event: PrivacyEvent, count: int) -> None:
        found = self._mu_squared_of(event)
        assert found is not None  # supports() said yes
        mu_squared, exact = found
        self._mu_squared += count * mu_squared
        if not exact:
            self.certified = False

    def _delta(self, epsilon: float) -> float:
        if self.mu == 0.0 or math.isinf(self.mu):  # (mu^2 underflowed, or a step with e^{1/sigma^2} = inf)
            return 0.0 if self.mu == 0.0 else 1.0
        return float(gaussian_delta(self.mu, epsilon))

    def _epsilon(self, delta: float) -> float:
        if self.mu == 0.0 or math.isinf(self.mu):
            return 0.0 if self.mu == 0.0 else math.inf
        return gaussian_epsilon(self.mu, delta)


# -- the saddle-point accountant -------------------------------------------------------------------

# The cumulant generating function K(t) = log E_P[e^{t L}] of one event's privacy loss L, with its
# first two derivatives, at t > 0: returns (K, K', K'').
Cumulants = Callable[[float], tuple[float, float, float]]

_LEGENDRE_NODES, _LEGENDRE_WEIGHTS = np.polynomial.legendre.leggauss(64)


# The cumulant functions are module-level functions bound with functools.partial (not closures),
# so that an accountant holding them pickles and deep-copies.


def _gaussian_cumulants(mu: float) -> Cumulants:
    return functools.partial(_gaussian_cumulant_values, mu)


def _gaussian_cumulant_values(mu: float, t: float) -> tuple[float, float, float]:
    # L ~ N(mu^2/2, mu^2) under P, so K(t) = mu^2 t (t + 1) / 2.
    return mu * mu * t * (t + 1) / 2, mu * mu * (2 * t + 1) / 2, mu * mu


def _laplace_cumulants(scale: float) -> Cumulants:
    """Privacy loss of Lap(0, b) vs Lap(1, b): atoms +a (mass 1/2), -a (mass e^{-a}/2) with a = 1/b,
    and on (-a, a) the density e^{-a/2} e^{l/2} / 4 (change of variable l = (1 - 2y)/b)."""
    return functools.partial(_laplace_cumulant_values, 1.0 / scale)


def _laplace_cumulant_values(a: float, t: float) -> tuple[float, float, float]:
    s = t + 0.5
    far = math.exp(-a * (1 + 2 * t))  # e^{-a} e^{-2ta}: every moment is scaled by e^{-ta}
    moments = [0.5 * a**k + 0.5 * (-a) ** k * far for k in range(3)]
    if s * a > 20:
        # int_{-a}^{a} l^k e^{s l} dl = [e^{s l} P_k(l)], P_0 = 1/s, P_1 = l/s - 1/s^2, ...
        def primitive(x: float, k: int) -> float:
            return (1 / s, x / s - 1 / s**2, x * x / s - 2 * x / s**2 + 2 / s**3)[k]

        for k in range(3):
            moments[k] += 0.25 * (primitive(a, k) - far * primitive(-a, k))
    else:
        nodes = a * _LEGENDRE_NODES
        weights = a * _LEGENDRE_WEIGHTS * 0.25 * np.exp(-a / 2 + s * nodes - t * a)
        for k in range(3):
            moments[k] += float(np.sum(weights * nodes**k))
    mean = moments[1] / moments[0]
    return t * a + math.log(moments[0]), mean, moments[2] / moments[0] - mean * mean


def _subsampled_gaussian_cumulants(rate: float, sigma: float, remove: bool) -> Cumulants:
    """Poisson-subsampled Gaussian: P = (1-q) N(0, s^2) + q N(1, s^2) vs Q = N(0, s^2) ("remove"),
    or the reverse order ("add"); moments by the trapezoid rule on a grid in y, spectrally accurate
    for these smooth, Gaussian-tailed integrands (Alghamdi et al. 2023 compute them numerically)."""
    return functools.partial(_subsampled_gaussian_cumulant_values, rate, sigma, remove)


def _subsampled_gaussian_cumulant_values(
    rate: float, sigma: float, remove: bool, t: float
) -> tuple[float, float, float]:
    log_keep = math.log1p(-rate)
    log_rate = math.log(rate)
    low, high = -12 * sigma - 1 - t, 12 * sigma + 2 + t
    points = int(min(max((high - low) / (sigma / 16), 2001), 200001))
    y = np.linspace(low, high, points)
    log_q = -0.5 * (y / sigma) ** 2
    loss = np.logaddexp(log_keep, log_rate + (2 * y - 1) / (2 * sigma**2))  # log p/q, remove order
    if remove:
        log_weight = log_q + (1 + t) * loss  # p^{1+t} q^{-t} = q e^{(1+t) L}
    else:
        loss = -loss
        log_weight = log_q + t * loss  # q^{1+t} p^{-t}, with L = log q/p under Q
    shift = float(np.max(log_weight))
    weight = np.exp(log_weight - shift)
    m0 = float(np.sum(weight))
    m1 = float(np.sum(weight * loss)) / m0
    m2 = float(np.sum(weight * loss * loss)) / m0
    # the grid spacing and the 1/sqrt(2 pi s^2) cancel between K and the normalisation at t=0
    normaliser = math.log(sigma * math.sqrt(2 * math.pi)) - math.log((high - low) / (points - 1))
    return shift + math.log(m0) - normaliser, m1, m2 - m1 * m1


class SaddlePointAccountant(PrivacyAccountant):
    """Saddle-point accountant (Alghamdi, Gomez, Asoodeh, Calmon, Kosut & Sankar 2023, ICML).

    Composition adds the cumulant generating functions ``K(t) = log E_P[e^{t L}]`` of the privacy
    losses. Writing ``delta(eps) = E_P[(1 - e^{eps - L})^+]`` as the contour integral
    ``(1/2 pi i) int_{t - i inf}^{t + i inf} e^{K(z) - z eps} / (z (z + 1)) dz`` (their Thm. 3.1) and
    expanding at the saddle point ``t0 > 0`` of the whole exponent
    ``K(t) - t eps - log t - log(1 + t)`` (method of steepest descent, first order) gives
    ``delta ~= e^{K(t0) - t0 eps} / (t0 (1 + t0) sqrt(2 pi (K''(t0) + 1/t0^2 + 1/(1+t0)^2)))``.
    Both orders of the neighbours are composed and the larger delta is reported.

    Supports Gaussian, Laplace and Poisson-subsampled Gaussian events (add/remove). It is an
    approximation with no guarantee of direction: ``certified`` is always False.

    >>> from dpkit.events import GaussianEvent
    >>> accountant = SaddlePointAccountant().compose(GaussianEvent(2.0), count=4)
    >>> round(accountant.delta(1.0), 2)  # the exact value is 0.1269
    0.12
    """

    certified = False

    def __init__(self, neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE) -> None:
        super().__init__(neighbours)
        # Per order of the neighbours: (cumulants of one run, count).
        self._terms: tuple[list[tuple[Cumulants, int]], list[tuple[Cumulants, int]]] = ([], [])

    def _cumulants_of(self, event: PrivacyEvent) -> tuple[Cumulants, Cumulants] | None:
        if isinstance(event, GaussianEvent) and event.neighbours is self.neighbours:
            symmetric = _gaussian_cumulants(1.0 / event.noise_multiplier)
            return symmetric, symmetric
        if isinstance(event, LaplaceEvent) and event.neighbours is self.neighbours:
            symmetric = _laplace_cumulants(event.noise_multiplier)
            return symmetric, symmetric
        if (
            isinstance(event, PoissonSampledEvent)
            and self.neighbours is NeighbourRelation.ADD_REMOVE
            and _plain_gaussian(event.event, self.neighbours) is not None
        ):
            assert isinstance(event.event, GaussianEvent)
            rate, sigma = event.sampling_probability, event.event.noise_multiplier
            if rate == 1.0:
                symmetric = _gaussian_cumulants(1.0 / sigma)
                return symmetric, symmetric
            return (
                _subsampled_gaussian_cumulants(rate, sigma, remove=True),
                _subsampled_gaussian_cumulants(rate, sigma, remove=False),
            )
        return None

    def _supports_atomic(self, event: PrivacyEvent) -> bool:
        return self._cumulants_of(event) is not None

    def _compose_atomic(self, event: PrivacyEvent, count: int) -> None:
        found = self._cumulants_of(event)
        assert found is not None  # supports() said yes
        for terms, cumulants in zip(self._terms, found, strict=True):
            terms.append((cumulants, count))

    @staticmethod
    def _total(terms: list[tuple[Cumulants, int]], t: float) -> tuple[float, float, float]:
        k0 = k1 = k2 = 0.0
        for cumulants, count in terms:
            c0, c1, c2 = cumulants(t)
            k0, k1, k2 = k0 + count * c0, k1 + count * c1, k2 + count * c2
        return k0, k1, k2

    def _log_delta_one(self, terms: list[tuple[Cumulants, int]], epsilon: float) -> float:
        def slope(t: float) -> float:
            return self._total(terms, t)[1] - 1 / t - 1 / (1 + t) - epsilon

        low, high = 1e-9, 1.0
        while slope(high) < 0:
            low, high = high, high * 2
            if high > 1e8:
                return -math.inf  # the loss is bounded below eps: delta is 0
        if not slope(low) < 0:
            # The saddle lies below t = 1e-9: epsilon is at or below the mean loss, where delta is
            # close to 1; answer the trivial delta = 1 (brentq had no sign change to bracket).
            return 0.0
        t0 = float(optimize.brentq(slope, low, high, xtol=1e-12, rtol=1e-12))
        k0, _, k2 = self._total(terms, t0)
        curvature = k2 + 1 / t0**2 + 1 / (1 + t0) ** 2
        return k0 - t0 * epsilon - math.log(t0) - math.log1p(t0) - 0.5 * math.log(2 * math.pi * curvature)

    def _log_delta(self, epsilon: float) -> float:
        return max(self._log_delta_one(terms, epsilon) for terms in self._terms)

    def _delta(self, epsilon: float) -> float:
        return min(math.exp(self._log_delta(epsilon)), 1.0)

    def _epsilon(self, delta: float) -> float:
        if delta == 0.0:
            return math.inf
        log_target = math.log(delta)
        if self._log_delta(0.0) <= log_target:
            return 0.0
        high = 1.0
        while self._log_delta(high) > log_target:
            high *= 2
            if high > 1e6:
                return math.inf
        return float(optimize.brentq(lambda e: self._log_delta(e) - log_target, 0.0, high, xtol=1e-10, rtol=1e-10))
