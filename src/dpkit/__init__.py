"""dpkit: differentially private data analysis.

The public words: guarantees (``PureDP``, ``ApproxDP``, ``ZCDP``, ``ApproxZCDP``), mechanisms (``Laplace``,
``Gaussian``, ``DiscreteLaplace``, ...), the error family rooted at ``DPError``, and the
subpackages ``dpkit.noise`` (secure exact samplers), ``dpkit.events`` and ``dpkit.audit``.

>>> import dpkit
>>> from dpkit.noise import InsecureSeededRandom
>>> count = dpkit.DiscreteLaplace(sensitivity=1, epsilon=0.5)
>>> isinstance(count.release(100, rng=InsecureSeededRandom(0)), int)
True
"""

from dpkit import audit, engine, events, guarantees, mechanisms, noise
from dpkit._errors import (
    AccuracyWarning,
    BudgetExceededError,
    DPError,
    InternalError,
    InvalidParameterError,
    LedgerCorruptedError,
    PostProcessingError,
    PrivacyWarning,
    QueryFailedError,
    UnsupportedEventError,
)
from dpkit.engine import Session
from dpkit.guarantees import ZCDP, ApproxDP, ApproxZCDP, NeighbourRelation, PureDP
from dpkit.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    Exponential,
    Gaussian,
    Geometric,
    Laplace,
    Mechanism,
    PermuteAndFlip,
    RandomizedResponse,
    ReportNoisyMax,
    SparseVector,
    Staircase,
)

__version__ = "0.1.0"

__all__ = [
    "ApproxDP",
    "ApproxZCDP",
    "BudgetExceededError",
    "DPError",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Exponential",
    "Gaussian",
    "Geometric",
    "AccuracyWarning",
    "InternalError",
    "InvalidParameterError",
    "Laplace",
    "LedgerCorruptedError",
    "QueryFailedError",
    "PostProcessingError",
    "Mechanism",
    "NeighbourRelation",
    "PermuteAndFlip",
    "PrivacyWarning",
    "PureDP",
    "RandomizedResponse",
    "ReportNoisyMax",
    "Session",
    "SparseVector",
    "Staircase",
    "UnsupportedEventError",
    "ZCDP",
    "audit",
    "engine",
    "events",
    "guarantees",
    "mechanisms",
    "noise",
]
