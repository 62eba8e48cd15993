"""Privacy events: plain, frozen, self-validating descriptions of what a release did.

A mechanism reports the event it performed; an accountant (``dpkit.accounting``) interprets
events. Events sit below the mechanisms in the layer order so that a mechanism can name its
event without knowing any accountant. Parameters are *noise multipliers* (noise scale divided
by sensitivity), as in Google's dp_accounting, so an event is independent of units.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_delta, check_epsilon, check_integer, check_positive
from dpkit.guarantees import NeighbourRelation

__all__ = [
    "ApproxDPEvent",
    "ComposedEvent",
    "DiscreteGaussianEvent",
    "DiscreteLaplaceEvent",
    "GaussianEvent",
    "LaplaceEvent",
    "GroupEvent",
    "PoissonSampledEvent",
    "PrivacyEvent",
    "PureDPEvent",
    "RandomizedResponseEvent",
    "SampledWithoutReplacementEvent",
    "SelfComposedEvent",
    "ZCDPEvent",
    "dpsgd_event",
]


@dataclass(frozen=True)
class PrivacyEvent:
    """Base of every event. ``neighbours`` is the relation under which the event's parameters hold."""


def _check_neighbours(event: PrivacyEvent) -> None:
    # An event without a valid relation (None, a string) would slip past an accountant's relation check.
    relation = getattr(event, "neighbours", None)
    if not isinstance(relation, NeighbourRelation):
        raise InvalidParameterError("neighbours", relation, "must be a dpkit.guarantees.NeighbourRelation")


@dataclass(frozen=True)
class LaplaceEvent(PrivacyEvent):
    """Laplace noise of scale ``noise_multiplier`` x (L1 sensitivity) added to a query."""

    noise_multiplier: float
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE

    def __post_init__(self) -> None:
        _check_neighbours(self)
        check_positive("noise_multiplier", self.noise_multiplier)


#: The noise multipliers a GaussianEvent takes (see its docstring).
_NOISE_MULTIPLIER_RANGE = (1e-150, 1e150)


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """Gaussian noise of standard deviation ``noise_multiplier`` x (L2 sensitivity).

    ``noise_multiplier`` must lie in [1e-150, 1e150]: there every accountant's arithmetic (1 / sigma^2,
    the subsampled curves' sigma^2 terms) stays within double precision; beyond it the guarantee is
    in effect none (epsilon above 1e300) or perfect (epsilon below 1e-300).
    """

    noise_multiplier: float
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE

    def __post_init__(self) -> None:
        _check_neighbours(self)
        value = check_positive("noise_multiplier", self.noise_multiplier)
        if not _NOISE_MULTIPLIER_RANGE[0] <= value <= _NOISE_MULTIPLIER_RANGE[1]:
            raise InvalidParameterError(
                "noise_multiplier", self.noise_multiplier, "must be in [1e-150, 1e150] (accountants' float range)"
            )


@dataclass(frozen=True)
class DiscreteLaplaceEvent(PrivacyEvent):
    """Discrete Laplace noise of scale ``scale`` on an integer query of L1 sensitivity ``sensitivity``."""

    scale: float
    sensitivity: int = 1
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE

    def __post_init__(self) -> None:
        _check_neighbours(self)
        check_positive("scale", self.scale)
        check_integer("sensitivity", self.sensitivity, minimum=1)


@dataclass(frozen=True)
class DiscreteGaussianEvent(PrivacyEvent):
    """Discrete Gaussian noise N_Z(0, sigma^2) on an integer query of L2 sensitivity ``sensitivity``."""

    sigma: float
    sensitivity: float = 1.0
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE

    def __post_init__(self) -> None:
        _check_neighbours(self)
        check_positive("sigma", self.sigma)
        check_positive("sensitivity", self.sensitivity)


@dataclass(frozen=True)
class RandomizedResponseEvent(PrivacyEvent):
    """k-ary randomized response: the true value with probability e^eps / (e^eps + k - 1)."""

    epsilon: float
    k: int = 2
    neighbours: NeighbourRelation = NeighbourRelation.REPLACE_ONE

    def __post_init__(self) -> None:
        _check_neighbours(self)
        check_epsilon(self.epsilon)
        check_integer("k", self.k, minimum=2)


@dataclass(frozen=True)
class PureDPEvent(PrivacyEvent):
    """A black-box epsilon-DP release (exponential mechanism, report-noisy-max, sparse vector...)."""

    epsilon: float
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE

    def __post_init__(self) -> None:
        _check_neighbours(self)
        check_epsilon(self.epsilon)


@dataclass(frozen=True)
class ApproxDPEvent(PrivacyEvent):
    """A black-box (epsilon, delta)-DP release."""

    epsilon: float
    delta: float
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE

    def __post_init__(self) -> None:
        _check_neighbours(self)
        check_epsilon(self.epsilon)
        check_delta(self.delta)


@dataclass(frozen=True)
class ZCDPEvent(PrivacyEvent):
    """A black-box rho-zCDP release."""

    rho: float
    neighbours: NeighbourRelation = NeighbourRelation.ADD_REMOVE

    def __post_init__(self) -> None:
        _check_neighbours(self)
        check_positive("rho", self.rho)


@dataclass(frozen=True)
class ComposedEvent(PrivacyEvent):
    """Several events run on the same data, one after the other.

    A list is accepted and copied into a tuple: the event stays an immutable, hashable value,
    so changing the caller's list later cannot rewrite an accountant's history. It must hold at
    least one event: an empty composition describes no release, and accountants read a
    composition through its parts.
    """

    events: tuple[PrivacyEvent, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.events, tuple | list) or not all(
            isinstance(event, PrivacyEvent) for event in self.events
        ):
            raise InvalidParameterError("events", self.events, "must be a tuple of PrivacyEvent")
        if not self.events:
            raise InvalidParameterError("events", self.events, "must hold at least one PrivacyEvent")
        object.__setattr__(self, "events", tuple(self.events))


@dataclass(frozen=True)
class SelfComposedEvent(PrivacyEvent):
    """One event repeated ``count`` times on the same data."""

    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        check_integer("count", self.count, minimum=1)
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameterError("event", self.event, "must be a PrivacyEvent")


@dataclass(frozen=True)
class PoissonSampledEvent(PrivacyEvent):
    """``event`` run on a Poisson sample: each record kept independently with ``sampling_probability``."""

    sampling_probability: float
    event: PrivacyEvent

    def __post_init__(self) -> None:
        from dpkit._validation import check_probability

        check_probability("sampling_probability", self.sampling_probability, open_low=True)
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameterError("event", self.event, "must be a PrivacyEvent")


@dataclass(frozen=True)
class SampledWithoutReplacementEvent(PrivacyEvent):
    """``event`` run on a uniformly random subset of ``sample_size`` of the ``source_size`` records."""

    source_size: int
    sample_size: int
    event: PrivacyEvent

    def __post_init__(self) -> None:
        check_integer("source_size", self.source_size, minimum=1)
        check_integer("sample_size", self.sample_size, minimum=1)
        if self.sample_size > self.source_size:
            raise InvalidParameterError("sample_size", self.sample_size, f"must be <= source_size={self.source_size}")
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameterError("event", self.event, "must be a PrivacyEvent")


@dataclass(frozen=True)
class GroupEvent(PrivacyEvent):
    """``event`` where the protected unit is a group of ``size`` people (group privacy)."""

    event: PrivacyEvent
    size: int

    def __post_init__(self) -> None:
        check_integer("size", self.size, minimum=1)
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameterError("event", self.event, "must be a PrivacyEvent")


def dpsgd_event(noise_multiplier: float, sampling_probability: float, steps: int) -> SelfComposedEvent:
    """The event of DP-SGD: ``steps`` Poisson-sampled Gaussian steps (Abadi et al. 2016).

    >>> dpsgd_event(1.1, 256 / 60000, 14063).count
    14063
    """
    return SelfComposedEvent(PoissonSampledEvent(sampling_probability, GaussianEvent(noise_multiplier)), steps)
