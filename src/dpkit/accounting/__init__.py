"""Privacy accounting: events compose into guarantees (see ``PrivacyAccountant``)."""

from dpkit.accounting._base import PrivacyAccountant
from dpkit.accounting._calibrate import calibrate_dpsgd_noise, calibrate_parameter
from dpkit.accounting._composition import (
    AdvancedAccountant,
    BasicAccountant,
    OptimalAccountant,
    fixed_privacy,
    optimal_composition_delta,
    parallel_composition,
)
from dpkit.accounting._filter import PrivacyFilter, PrivacyOdometer
from dpkit.accounting._rdp import RDPAccountant
from dpkit.accounting._zcdp import ZCDPAccountant
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
    "AdvancedAccountant",
    "BasicAccountant",
    "OptimalAccountant",
    "PrivacyFilter",
    "PrivacyOdometer",
    "calibrate_dpsgd_noise",
    "calibrate_parameter",
    "fixed_privacy",
    "optimal_composition_delta",
    "parallel_composition",
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
    "RDPAccountant",
    "RandomizedResponseEvent",
    "SampledWithoutReplacementEvent",
    "SelfComposedEvent",
    "ZCDPAccountant",
    "ZCDPEvent",
    "dpsgd_event",
]
