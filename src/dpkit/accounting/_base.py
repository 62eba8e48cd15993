"""The accountant interface: ``supports``, ``compose``, ``epsilon(delta)``, ``delta(epsilon)``.

Modelled on Google's dp_accounting ``PrivacyAccountant``, with two differences: an event is
checked in full (composites included) *before* any state changes, so a refused event leaves the
accountant exactly as it was; and every accountant states whether its answers are certified
upper bounds (``certified = True``) or approximations (the CLT/GDP and saddle-point accountants).
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from fractions import Fraction
from typing import Self

from dpkit._errors import InvalidParameterError, UnsupportedEventError
from dpkit._validation import check_delta, check_integer, check_positive
from dpkit.events import (
    ApproxDPEvent,
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
    SampledWithoutReplacementEvent,
    SelfComposedEvent,
    ZCDPEvent,
)
from dpkit.guarantees import NeighbourRelation

__all__ = ["PrivacyAccountant"]


class PrivacyAccountant(ABC):
    """Composes privacy events into an (epsilon, delta) guarantee.

    Subclasses implement :meth:`_supports_atomic` (may this accountant interpret this
    non-composite event?), :meth:`_compose_atomic` (fold ``count`` repetitions of a supported
    event into the state; must not fail once ``_supports_atomic`` said yes) and the two queries.
    """

    #: True when epsilon() / delta() are certified upper bounds; False for approximations.
    certified: bool = True

    def __init__(self, neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE) -> None:
        if not isinstance(neighbours, NeighbourRelation):
            raise InvalidParameterError("neighbours", neighbours, "must be a dpkit.guarantees.NeighbourRelation")
        self.neighbours = neighbours
        self._history: list[tuple[PrivacyEvent, int]] = []

    def __copy__(self) -> Self:
        """A full, independent copy: a shallow one would share the history and the composed state."""
        return copy.deepcopy(self)

    # -- the interface ----------------------------------------------------------------------

    def supports(self, event: PrivacyEvent) -> bool:
        """Whether :meth:`compose` would accept ``event`` (composites are checked in full)."""
        if isinstance(event, ComposedEvent):
            return all(self.supports(inner) for inner in event.events)
        if isinstance(event, SelfComposedEvent):
            return self.supports(event.event)
        if not isinstance(event, PrivacyEvent) or not self._same_relation(event):
            return False
        return self._supports_atomic(event)

    def _same_relation(self, event: PrivacyEvent) -> bool:
        """Whether ``event`` holds under this accountant's neighbour relation (fail closed).

        dpkit's sampling and group wrappers carry no relation of their own: their inner event's
        is checked. Any other event must declare ``neighbours`` equal to this accountant's; a
        custom event without one is refused rather than assumed to match.
        """
        if isinstance(event, ComposedEvent):
            return all(self._same_relation(inner) for inner in event.events)
        if isinstance(event, SelfComposedEvent | PoissonSampledEvent | SampledWithoutReplacementEvent | GroupEvent):
            return self._same_relation(event.event)
        return getattr(event, "neighbours", None) is self.neighbours

    def compose(self, event: PrivacyEvent, count: int = 1) -> Self:
        """Record ``count`` runs of ``event``; refuse it, unchanged, if it is not supported."""
        repeats = check_integer("count", count, minimum=1)
        if not self.supports(event):
            raise UnsupportedEventError(
                f"{type(self).__name__} (neighbours={self.neighbours.value}) cannot account for {event!r}"
            )
        for atomic, times in _flatten(event, repeats):
            self._compose_atomic(atomic, times)
        self._history.append((event, repeats))
        return self

    @property
    def history(self) -> tuple[tuple[PrivacyEvent, int], ...]:
        """The events composed so far, with their counts."""
        return tuple(self._history)

    def epsilon(self, delta: float) -> float:
        """The smallest epsilon this accountant can certify at ``delta`` (0 with no events)."""
        target = check_delta(delta, allow_zero=True)
        if not self._history:
            return 0.0
        return self._epsilon(target)

    def delta(self, epsilon: float) -> float:
        """The smallest delta this accountant can certify at ``epsilon`` (0 with no events)."""
        target = check_positive("epsilon", epsilon, allow_zero=True)
        if not self._history:
            return 0.0
        return self._delta(target)

    # -- for subclasses -----------------------------------------------------------------------

    @abstractmethod
    def _supports_atomic(self, event: PrivacyEvent) -> bool: ...

    @abstractmethod
    def _compose_atomic(self, event: PrivacyEvent, count: int) -> None: ...

    @abstractmethod
    def _epsilon(self, delta: float) -> float: ...

    @abstractmethod
    def _delta(self, epsilon: float) -> float: ...


def _flatten(event: PrivacyEvent, count: int) -> list[tuple[PrivacyEvent, int]]:
    """Non-composite events with their multiplicities, in order."""
    if isinstance(event, SelfComposedEvent):
        return _flatten(event.event, count * event.count)
    if isinstance(event, ComposedEvent):
        flat: list[tuple[PrivacyEvent, int]] = []
        for inner in event.events:
            flat.extend(_flatten(inner, count))
        return flat
    return [(event, count)]


def inverse_square(value: float) -> float:
    """1 / value^2 for value > 0, as a product: 0.0 past 1e154 and inf below 1e-154 instead of the
    OverflowError of ``value ** 2`` or the ZeroDivisionError of 1 / (value ** 2 underflowed to 0)."""
    inverse = 1.0 / value
    return inverse * inverse


def _times_up(value: float, factor: int) -> float:
    """``value * factor`` rounded up (a larger epsilon only weakens the claim)."""
    product = value * factor
    return product if Fraction(product) >= Fraction(value) * factor else math.nextafter(product, math.inf)


def _divided_down(value: float, divisor: int) -> float:
    """``value / divisor`` rounded down (less noise only weakens the claim)."""
    quotient = value / divisor
    return quotient if Fraction(quotient) * divisor <= Fraction(value) else math.nextafter(quotient, 0.0)


def _group_delta(epsilon: float, delta: float, size: int) -> float:
    """delta (1 + e^eps + ... + e^((k-1) eps)) = delta expm1(k eps) / expm1(eps), rounded up.

    The group-privacy bound of an (eps, delta)-DP release for k people (Vadhan 2017, "The
    complexity of differential privacy", Lemma 2.2). The closed form errs by a relative
    (k eps + 6) u at most (expm1's argument k eps carries a relative u, expm1 itself and the
    division a few u); the result is raised by twice that, then by an ulp.
    """
    unit = 2.0**-53
    ratio = math.expm1(size * epsilon) / math.expm1(epsilon)
    return math.nextafter(delta * ratio * (1 + 2 * (size * epsilon + 8) * unit), math.inf)


def grouped_event(event: PrivacyEvent, size: int) -> PrivacyEvent | None:
    """The event a group of ``size`` people sees, for events where that is exact; else None.

    A group moves an L1/L2 sensitivity by at most ``size`` times (triangle inequality), so additive
    noise keeps its shape with the sensitivity scaled (a noise multiplier divided by ``size``,
    rounded down); an eps-DP release is (k eps)-DP and an (eps, delta)-DP one is
    (k eps, delta sum_{i<k} e^(i eps))-DP (Dwork & Roth 2014, Thm. 2.2; Vadhan 2017, Lemma 2.2);
    rho-zCDP becomes (k^2 rho)-zCDP (Bun & Steinke 2016, Prop. 1.9); epsilons and rho rounded up.
    Subsampled events have no such form (the sampling of the group's members is not that of one
    record; Poisson sampling with probability 1 keeps everyone and is no sampling), nor does an
    event that leaves the events' range (noise below 1e-150, delta >= 1).
    Shared by the RDP, zCDP and PLD accountants.
    """
    try:
        if isinstance(event, GroupEvent):
            return grouped_event(event.event, event.size * size)
        if isinstance(event, PoissonSampledEvent) and event.sampling_probability == 1.0:
            return grouped_event(event.event, size)  # every record kept: no sampling
        if isinstance(event, SelfComposedEvent):
            inner = grouped_event(event.event, size)
            return None if inner is None else SelfComposedEvent(inner, event.count)
        if isinstance(event, ComposedEvent):
            parts = [grouped_event(part, size) for part in event.events]
            grouped = [part for part in parts if part is not None]
            return ComposedEvent(tuple(grouped)) if len(grouped) == len(parts) else None
        if isinstance(event, GaussianEvent):
            return GaussianEvent(_divided_down(event.noise_multiplier, size), event.neighbours)
        if isinstance(event, LaplaceEvent):
            return LaplaceEvent(_divided_down(event.noise_multiplier, size), event.neighbours)
        if isinstance(event, DiscreteLaplaceEvent):
            return DiscreteLaplaceEvent(event.scale, event.sensitivity * size, event.neighbours)
        if isinstance(event, DiscreteGaussianEvent):
            return DiscreteGaussianEvent(event.sigma, event.sensitivity * size, event.neighbours)
        if isinstance(event, PureDPEvent | RandomizedResponseEvent):
            return PureDPEvent(_times_up(event.epsilon, size), event.neighbours)
        if isinstance(event, ZCDPEvent):
            return ZCDPEvent(_times_up(event.rho, size * size), event.neighbours)
        if isinstance(event, ApproxDPEvent):
            delta = _group_delta(event.epsilon, event.delta, size)
            return ApproxDPEvent(_times_up(event.epsilon, size), delta, event.neighbours)
    except (InvalidParameterError, OverflowError):
        return None
    return None
