"""Mechanisms: each turns a query of known sensitivity into a private release.

Every mechanism states its guarantee, its privacy map and its privacy event, validates its
parameters at construction, and draws its noise from the secure source (``dpkit.noise``).
"""

from dpkit.mechanisms._base import Mechanism, NumericMechanism, guarantee_implies
from dpkit.mechanisms.discrete_gaussian import DiscreteGaussian, discrete_gaussian_delta
from dpkit.mechanisms.exponential import Exponential
from dpkit.mechanisms.gaussian import (
    Gaussian,
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    discrete_gaussian_delta_upper,
)
from dpkit.mechanisms.geometric import DiscreteLaplace, Geometric
from dpkit.mechanisms.laplace import Laplace
from dpkit.mechanisms.noisy_max import PermuteAndFlip, ReportNoisyMax
from dpkit.mechanisms.randomized_response import RandomizedResponse, bernoulli_keep
from dpkit.mechanisms.sensitivity import (
    bounded_sum_sensitivity,
    clamp,
    count_sensitivity,
    float_sum_error,
    histogram_sensitivity,
    mean_sensitivity,
    noisy_mean,
    nonnegative,
)
from dpkit.mechanisms.sparse_vector import SparseVector, SparseVectorRun
from dpkit.mechanisms.staircase import Staircase

__all__ = [
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Exponential",
    "Gaussian",
    "Geometric",
    "Laplace",
    "Mechanism",
    "NumericMechanism",
    "PermuteAndFlip",
    "RandomizedResponse",
    "ReportNoisyMax",
    "SparseVector",
    "SparseVectorRun",
    "Staircase",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "bernoulli_keep",
    "bounded_sum_sensitivity",
    "clamp",
    "classic_gaussian_sigma",
    "count_sensitivity",
    "discrete_gaussian_delta",
    "discrete_gaussian_delta_upper",
    "float_sum_error",
    "guarantee_implies",
    "histogram_sensitivity",
    "mean_sensitivity",
    "noisy_mean",
    "nonnegative",
]
