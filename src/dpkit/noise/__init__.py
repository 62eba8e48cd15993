"""The randomness seam and exact, vectorized, floating-point-safe samplers."""

from dpkit.noise._grid import grid_exponent, snap_to_grid
from dpkit.noise._random import InsecureSeededRandom, RandomSource, SecureRandom, default_source, resolve_source
from dpkit.noise._samplers import (
    MAX_SCALE,
    bernoulli_exp,
    bernoulli_logistic,
    bernoulli_rational,
    constant_time_tv_bound,
    discrete_gaussian,
    discrete_laplace,
    geometric,
    permutation,
    uniform_integers,
)

__all__ = [
    "MAX_SCALE",
    "InsecureSeededRandom",
    "RandomSource",
    "SecureRandom",
    "bernoulli_exp",
    "bernoulli_logistic",
    "bernoulli_rational",
    "constant_time_tv_bound",
    "default_source",
    "discrete_gaussian",
    "discrete_laplace",
    "geometric",
    "grid_exponent",
    "permutation",
    "resolve_source",
    "snap_to_grid",
    "uniform_integers",
]
