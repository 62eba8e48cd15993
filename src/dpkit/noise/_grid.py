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

from dpkit._errors import InvalidParameterError
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


def grid_value_limit(exponent: int) -> float:
    """The largest |value| a release on the grid 2^exponent accepts (public: from the exponent only).

    Below it, the value in grid units is finite and the value plus any int64 noise draw
    (|noise| < 2^63 units) rounds to a finite float: max_float - 2^(exponent + 63) - 2^exponent,
    and at most max_float * 2^exponent. A grid so coarse that the noise alone can overflow
    accepts nothing (returns -1.0).
    """
    exponent = check_integer("exponent", exponent)
    largest = float(np.finfo(np.float64).max)
    if exponent + 63 >= 1024:
        return -1.0
    limit = largest - math.ldexp(1.0, exponent + 63) - math.ldexp(1.0, exponent)
    if exponent < 0:
        limit = min(limit, math.ldexp(largest, exponent) - math.ldexp(1.0, exponent))
    return limit


def snap_to_grid(values: NDArray[np.float64], exponent: int, *, name: str = "value") -> NDArray[np.float64]:
    """Round each value to the nearest multiple of 2^exponent (exact in float64: ldexp and rint).

    Values beyond :func:`grid_value_limit` (which would become infinite in grid units, or once
    noise is added) are refused with an :class:`~dpkit.InvalidParameterError` naming ``name``;
    mechanisms snap before drawing any noise, so nothing is drawn for a refused value.

    >>> snap_to_grid(np.array([0.3, -1.7]), -2).tolist()
    [0.25, -1.75]
    """
    array = np.asarray(values, dtype=np.float64)
    limit = grid_value_limit(exponent)
    if array.size and not float(np.max(np.abs(array))) <= limit:
        if limit < 0:
            allowed = (
                f"cannot be released on the output grid 2^{exponent}: noise this large could overflow float64 "
                "(use a smaller sensitivity or a larger epsilon)"
            )
        else:
            allowed = (
                f"must be at most {limit:.6g} in magnitude on this mechanism's output grid 2^{exponent} "
                "(a larger value, or its sum with the noise, would overflow float64)"
            )
        raise InvalidParameterError(name, values, allowed)
    return np.ldexp(np.rint(np.ldexp(array, -exponent)), exponent)
