"""Privacy accounting: events compose into guarantees (see ``PrivacyAccountant``)."""

from dpkit.accounting._base import PrivacyAccountant
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
    dpsgd_event,
)

__all__ = [
    "ApproxDPEvent",
    "ComposedEvent",
    "DiscreteGaussianEvent",
    "DiscreteLaplaceEvent",
    "GaussianEvent",
    "GroupEvent",
    "LaplaceEvent",
    "PoissonSampledEvent",
    "PrivacyAccountant",
    "PrivacyEvent",
    "PureDPEvent",
    "RandomizedResponseEvent",
    "SampledWithoutReplacementEvent",
    "SelfComposedEvent",
    "ZCDPEvent",
    "dpsgd_event",
]
