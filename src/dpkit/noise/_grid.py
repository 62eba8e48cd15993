"""Floating-point safety for real-valued releases (Mironov 2012).

A real-valued query is released on a public grid of spacing 2^k: the value is rounded to the
grid, integer noise (in grid units) is added, and the result is multiplied back. Every output
is then a multiple of 2^k whose low bits carry no trace of the private value. The exponent k is
chosen from public parameters only (the sensitivity, the dimension and the noise scale).
Rounding moves neighbouring values apart by at most 2^k per coordinate, which the mechanisms
add to their sensitivity.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from dpkit._validation import check_integer, check_positive

__all__ = ["grid_exponent", "snap_to_grid"]

# The grid is 2^-20 of the per-coordinate sensitivity share, so rounding inflates the
# sensitivity by about one part in a million...
_GRID_BITS = 20
# ...unless the noise would then exceed 2^30 grid units, where the samplers' float fast path
# starts to need its exact fallback more often; then the grid coarsens to noise / 2^30.
_MAX_NOISE_UNITS = 2.0**30


def grid_exponent(sensitivity: float, noise_scale: float, dimension: int = 1, *, norm: int = 1) -> int:
    """The exponent k of the public output grid 2^k, from public parameters only.

    >>> grid_exponent(1.0, 10.0)
    -20
    """
    sens = check_positive("sensitivity", sensitivity)
    scale = check_positive("noise_scale", noise_scale)
    d = check_integer("dimension", dimension, minimum=1)
    share = sens / (d if norm == 1 else math.sqrt(d))
    k = math.floor(math.log2(share)) - _GRID_BITS
    ratio = scale / _MAX_NOISE_UNITS  # exact unless it underflows (a noise scale below ~5e-315)
    coarse = math.ceil(math.log2(ratio)) if ratio > 0 else math.ceil(math.log2(scale) - math.log2(_MAX_NOISE_UNITS))
    return max(k, coarse)


def snap_to_grid(values: NDArray[np.float64], exponent: int) -> NDArray[np.float64]:
    """Round each value to the nearest multiple of 2^exponent (exact in float64: ldexp and rint).

    >>> snap_to_grid(np.array([0.3, -1.7]), -2).tolist()
    [0.25, -1.75]
    """
    return np.ldexp(np.rint(np.ldexp(np.asarray(values, dtype=np.float64), -exponent)), exponent)
