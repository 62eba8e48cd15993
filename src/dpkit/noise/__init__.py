"""The randomness seam and exact, vectorized, floating-point-safe samplers."""

from dpkit.noise._grid import (
    MAX_RELEASE_SCALE,
    add_noise_on_grid,
    grid_exponent,
    sensitivity_grid_exponent,
    snap_to_grid,
)
from dpkit.noise._random import InsecureSeededRandom, RandomSource, SecureRandom, default_source, resolve_source
from dpkit.noise._samplers import (
    MAX_SCALE,
    bernoulli_exp,
    bernoulli_logistic,
    bernoulli_rational,
    constant_time_tv_bound,
    discrete_gaussian,
    discrete_laplace,
    discrete_laplace_units,
    geometric,
    geometric_units,
    permutation,
    uniform_integers,
)

__all__ = [
    "MAX_RELEASE_SCALE",
    "MAX_SCALE",
    "InsecureSeededRandom",
    "RandomSource",
    "SecureRandom",
    "add_noise_on_grid",
    "bernoulli_exp",
    "bernoulli_logistic",
    "bernoulli_rational",
    "constant_time_tv_bound",
    "default_source",
    "discrete_gaussian",
    "discrete_laplace",
    "discrete_laplace_units",
    "geometric",
    "geometric_units",
    "grid_exponent",
    "permutation",
    "resolve_source",
    "sensitivity_grid_exponent",
    "snap_to_grid",
    "uniform_integers",
]
