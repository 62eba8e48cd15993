"""Zero-concentrated DP accounting (Bun & Steinke 2016): one number, rho, that adds up.

rho-zCDP bounds every Rényi divergence by rho * alpha, so composition adds rho (Bun & Steinke
2016, Lemma 2.3) and a single conversion at the end gives (epsilon, delta). Coarser than the
RDP accountant (which keeps the whole curve), but exact for Gaussians.
"""

from __future__ import annotations

import functools
import math

from dpkit._search import bisect_floats
from dpkit.accounting._base import PrivacyAccountant, grouped_event, inverse_square
from dpkit.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    GroupEvent,
    LaplaceEvent,
    PrivacyEvent,
    PureDPEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
    ZCDPEvent,
)
from dpkit.guarantees import ZCDP, NeighbourRelation, round_up

_UNIT_ROUNDOFF = 2.0**-52

__all__ = ["ZCDPAccountant"]


@functools.singledispatch
def _rho(event: PrivacyEvent, relation: NeighbourRelation) -> float | None:
    """The zCDP rho of one event, or None when this accountant cannot bound it."""
    return None


@_rho.register
def _(event: GaussianEvent, relation: NeighbourRelation) -> float | None:
    # Bun & Steinke 2016, Prop. 1.6: N(0, sigma^2 Delta^2) is 1/(2 sigma^2)-zCDP.
    return 0.5 * inverse_square(event.noise_multiplier)


@_rho.register
def _(event: DiscreteGaussianEvent, relation: NeighbourRelation) -> float | None:
    # Canonne, Kamath & Steinke 2020, Thm. 4 / Thm. 14: Delta^2 / (2 sigma^2)-zCDP.
    return 0.5 * inverse_square(event.sigma / event.sensitivity)


@_rho.register
def _(event: LaplaceEvent, relation: NeighbourRelation) -> float | None:
    # Laplace of scale b on sensitivity 1 is (1/b)-DP, hence (1/b)^2/2-zCDP (Prop. 1.4).
    return 0.5 * inverse_square(event.noise_multiplier)


@_rho.register
def _(event: DiscreteLaplaceEvent, relation: NeighbourRelation) -> float | None:
    # The discrete Laplace of scale t on sensitivity Delta is (Delta / t)-DP.
    return 0.5 * (event.sensitivity / event.scale) ** 2


@_rho.register
def _(event: PureDPEvent, relation: NeighbourRelation) -> float | None:
    # Bun & Steinke 2016, Prop. 1.4: epsilon-DP implies (epsilon^2 / 2)-zCDP.
    return 0.5 * event.epsilon**2


@_rho.register
def _(event: RandomizedResponseEvent, relation: NeighbourRelation) -> float | None:
    return 0.5 * event.epsilon**2


@_rho.register
def _(event: ZCDPEvent, relation: NeighbourRelation) -> float | None:
    return event.rho


@_rho.register
def _(event: GroupEvent, relation: NeighbourRelation) -> float | None:
    grouped = grouped_event(event.event, event.size)
    if grouped is None:
        return None
    return _total_rho(grouped, relation)


def _total_rho(event: PrivacyEvent, relation: NeighbourRelation) -> float | None:
    if isinstance(event, SelfComposedEvent):
        inner = _total_rho(event.event, relation)
        return None if inner is None else event.count * inner
    if isinstance(event, ComposedEvent):
        parts = [_total_rho(inner, relation) for inner in event.events]
        if any(part is None for part in parts):
            return None
        return math.fsum(part for part in parts if part is not None)
    if getattr(event, "neighbours", relation) is not relation:
        return None
    return _rho(event, relation)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """The smallest delta such that rho-zCDP implies (epsilon, delta)-DP, by the CKS conversion.

    Canonne, Kamath & Steinke 2020, Prop. 12 with D_alpha <= rho alpha:
    delta = inf_{alpha > 1} exp((alpha - 1)(alpha rho - epsilon) + (alpha - 1) log(1 - 1/alpha)) / alpha,
    and delta <= sqrt(1 - e^{-rho}) (Bretagnolle-Huber, KL <= rho). Any alpha gives a valid bound.

    The exponent f is strictly convex (f'' = 2 rho + 1/(alpha (alpha - 1)) > 0), so its minimum is
    the root of f'(alpha) = (2 alpha - 1) rho - epsilon + log(1 - 1/alpha), found by bisection in
    u = log(alpha - 1) (which also reaches optima closer to 1 than a float alpha can). The optimum
    sits near alpha = max(epsilon / (2 rho), 1 / sqrt(2 rho)); the bounded search used before
    stopped at alpha = 4 (epsilon + rho) / (2 rho) + 2, ~6 at epsilon = 0, and answered up to 17%
    too loose there. A few ulps of every term of f are added, so the answer is never below the
    exact optimum of the bound.
    """

    def slope(u: float) -> float:  # f'(alpha)
        gap = math.exp(u)
        log_ratio = -math.log1p(math.exp(-u)) if u > -700 else u
        return (1 + 2 * gap) * rho - epsilon + log_ratio

    # Bracket the root of the increasing f' in u; alpha - 1 stays within [e^-700, e^700].
    low, high = -700.0, 1.0
    while slope(high) < 0 and high < 700:
        high = min(2 * high, 700.0)
    if slope(low) >= 0:
        high = low
    else:
        low, high = bisect_floats(lambda u: slope(u) < 0, low, high)
    candidates = [0.5 * math.log(-math.expm1(-rho)) if rho > 0 else 0.0]  # Bretagnolle-Huber
    for u in (low, high):
        # f = (alpha-1) ((alpha rho) - epsilon + log(1 - 1/alpha)) - log alpha at alpha = 1 + e^u, the
        # bracket first (a huge epsilon sends the product to -inf, not to inf - inf).
        gap = math.exp(u)
        log_ratio = -math.log1p(math.exp(-u)) if u > -700 else u  # log(1 - 1/alpha) = -log1p(1/(alpha-1))
        exponent = gap * ((1 + gap) * rho - epsilon + log_ratio) - math.log1p(gap)
        if math.isfinite(exponent):
            exponent += 8 * _UNIT_ROUNDOFF * (gap * ((1 + gap) * rho + epsilon - log_ratio) + math.log1p(gap))
        if not math.isnan(exponent):
            candidates.append(exponent)
    return min(1.0, math.nextafter(math.exp(min(candidates)), math.inf))


class ZCDPAccountant(PrivacyAccountant):
    """zCDP accountant: rho adds under composition; (epsilon, delta) by the tight CKS conversion.

    Supports Gaussian, discrete Gaussian, Laplace, discrete Laplace, pure DP, randomized response
    and zCDP events and group privacy of those; subsampled events are refused (zCDP has no
    amplification by subsampling). Answers are certified upper bounds.

    >>> from dpkit.events import GaussianEvent
    >>> accountant = ZCDPAccountant().compose(GaussianEvent(2.0), count=4)
    >>> round(accountant.rho, 12)   # four sigma = 2 Gaussians are one of sigma = 1
    0.5
    >>> round(accountant.epsilon(1e-6), 3)
    5.222
    """

    def __init__(self, neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE) -> None:
        super().__init__(neighbours)
        self._rho_total = 0.0

    @property
    def rho(self) -> float:
        """The composed rho (rounded up)."""
        return self._rho_total

    @property
    def guarantee(self) -> ZCDP | None:
        """The composed guarantee as a :class:`dpkit.guarantees.ZCDP` (None before any event)."""
        if self._rho_total == 0:
            return None
        return ZCDP(self._rho_total, self.neighbours)

    def _supports_atomic(self, event: PrivacyEvent) -> bool:
        try:
            rho = _rho(event, self.neighbours)
        except (ZeroDivisionError, OverflowError):  # a noise multiplier so small that rho is infinite
            return False
        return rho is not None and math.isfinite(rho) and rho >= 0

    def _compose_atomic(self, event: PrivacyEvent, count: int) -> None:
        rho = _rho(event, self.neighbours)
        assert rho is not None
        # Round every step up so the float total never falls below the exact sum.
        self._rho_total = round_up(self._rho_total + round_up(count * rho, 2), 2)

    def _epsilon(self, delta: float) -> float:
        if delta == 0:
            return math.inf
        rho = self._rho_total
        if delta**2 >= -math.expm1(-rho):
            # delta >= sqrt(1 - e^{-KL}) >= total variation distance: epsilon = 0 holds.
            return 0.0
        return ZCDP(rho, self.neighbours).to_approx(delta).epsilon

    def _delta(self, epsilon: float) -> float:
        return min(1.0, round_up(zcdp_delta(self._rho_total, epsilon) * (1 + 1e-9), 4))
