"""Floating-point safety for real-valued releases (Mironov 2012).

A real-valued query is released on a public grid of spacing 2^k: the value is rounded to the
grid, integer noise (in grid units) is added, and the result is multiplied back. Every output
is then a multiple of 2^k whose low bits carry no trace of the private value. The exponent k is
chosen from public parameters only (the sensitivity, the dimension and, for
:func:`grid_exponent`, the noise scale). Rounding moves neighbouring values apart by at most 2^k
per coordinate, which the mechanisms add to their sensitivity.

The sum of the value and the noise (in grid units) is an exact integer; turning it into a float
(:func:`add_noise_on_grid`, rounded once to the nearest float, saturating at the largest finite
float) is post-processing of that integer, so it costs no privacy whatever the noise's size.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._validation import check_integer, check_positive

__all__ = [
    "MAX_RELEASE_SCALE",
    "add_noise_on_grid",
    "capped_grid_exponent",
    "grid_exponent",
    "sensitivity_grid_exponent",
    "snap_to_grid",
]

# The grid is 2^-20 of the per-coordinate sensitivity share, so rounding inflates the
# sensitivity by about one part in a million...
_GRID_BITS = 20
# ...and grid_exponent, by default, coarsens it once the noise would exceed 2^30 grid units (the
# samplers' float fast path needs its exact fallback more often above): then the grid is noise / 2^30.
_MAX_NOISE_UNITS = 2.0**30
# Value limits leave room for noise up to 2^15 of its scales (2^63 units for int64 noise of
# unknown scale): a draw beyond has probability below e^-(2^14) and saturates (add_noise_on_grid).
_NOISE_BOUND_SCALE_BITS = 15
_INT64_NOISE_BITS = 63
# Noise within 2^1022 leaves every value below 2^1000 (the largest the mechanisms take) room.
_LARGEST_NOISE_BOUND_BITS = 1022
#: Largest noise scale (in output units, 2^k times the scale in grid units) whose releases stay
#: within float64: 2^15 such scales stay below 2^1022.
MAX_RELEASE_SCALE = math.ldexp(1.0, _LARGEST_NOISE_BOUND_BITS - _NOISE_BOUND_SCALE_BITS)
# Integer-valued floats up to 2^53 are exact, so int64 noise below it converts exactly.
_EXACT_FLOAT_INTEGER = 2**53
_LARGEST_FLOAT = float(np.finfo(np.float64).max)


def sensitivity_grid_exponent(sensitivity: float, dimension: int = 1, *, norm: int = 1) -> int:
    """k = floor(log2(share)) - 20 for the per-coordinate share Delta / d (L1) or Delta / sqrt(d) (L2).

    The grid 2^k is 2^-20 of the share, so rounding to it adds at most d 2^k <= 2^-20 Delta (L1) or
    sqrt(d) 2^k <= 2^-20 Delta (L2) to the sensitivity (up to the float rounding of the share, a
    relative 2^-52), whatever the noise. It depends on public parameters only.

    >>> sensitivity_grid_exponent(1.0), sensitivity_grid_exponent(1.0, 100), sensitivity_grid_exponent(1.0, 100, norm=2)
    (-20, -27, -24)
    """
    sens = check_positive("sensitivity", sensitivity)
    d = check_integer("dimension", dimension, minimum=1)
    share = sens / (d if norm == 1 else math.sqrt(d))
    if share == 0:
        raise InvalidParameterError(
            "dimension", dimension, f"is too large for sensitivity {sens!r}: the per-coordinate share underflows"
        )
    return math.frexp(share)[1] - 1 - _GRID_BITS  # floor(log2(share)), exactly (math.log2 can round up)


def grid_exponent(sensitivity: float, noise_scale: float, dimension: int = 1, *, norm: int = 1) -> int:
    """The exponent k of the public output grid 2^k, from public parameters only.

    :func:`sensitivity_grid_exponent`, coarsened (when needed) until the noise is at most 2^30 grid
    units.

    >>> grid_exponent(1.0, 10.0), grid_exponent(1.0, 2.0**20)
    (-20, -10)
    """
    scale = check_positive("noise_scale", noise_scale)
    k = sensitivity_grid_exponent(sensitivity, dimension, norm=norm)
    ratio = scale / _MAX_NOISE_UNITS  # exact (a power of two), unless it underflows (a scale below ~5e-315)
    coarse = math.ceil(math.log2(ratio)) if ratio > 0 else math.ceil(math.log2(scale) - math.log2(_MAX_NOISE_UNITS))
    return max(k, coarse)


#: Most bits :func:`capped_grid_exponent` coarsens the sensitivity grid by: rounding then adds at
#: most 2^-10 of the sensitivity (d 2^k <= 2^-10 Delta), whatever the noise.
_MAX_COARSENING_BITS = 10


def capped_grid_exponent(sensitivity: float, noise_scale: float, dimension: int = 1, *, norm: int = 1) -> int:
    """:func:`grid_exponent` (noise within 2^30 grid units), coarsened at most 10 bits past
    :func:`sensitivity_grid_exponent`: the effective sensitivity stays within 2^-10 of Delta (2^-20
    while the noise fits 2^30 units at the fine grid), and noise beyond that many units is drawn
    exactly in parts. Where the cap does not bind this is :func:`grid_exponent`, so releases there
    are the same draws. An infinite ``noise_scale`` (overflowed: refused later) gets the cap.

    >>> capped_grid_exponent(1.0, 10.0), capped_grid_exponent(1.0, 2.0**15), capped_grid_exponent(1.0, 2.0**40)
    (-20, -15, -10)
    """
    fine = sensitivity_grid_exponent(sensitivity, dimension, norm=norm)
    if noise_scale == math.inf:
        return fine + _MAX_COARSENING_BITS
    return min(grid_exponent(sensitivity, noise_scale, dimension, norm=norm), fine + _MAX_COARSENING_BITS)


def noise_bound_bits(noise_scale: float | None) -> int:
    """b with |noise| < 2^b grid units but with probability below e^-(2^14): 2^b >= 2^15 scales.

    ``None`` is int64 noise of unknown scale (b = 63). For discrete Laplace (and lighter) noise,
    P(|Z| >= 2^15 t) <= 2 e^-(2^15).
    """
    if noise_scale is None:
        return _INT64_NOISE_BITS
    return max(0, math.frexp(check_positive("noise_scale", noise_scale))[1] + _NOISE_BOUND_SCALE_BITS)


def grid_value_limit(exponent: int, noise_scale: float | None = None) -> float:
    """The largest |value| a release on the grid 2^exponent accepts (public: from the exponent and noise scale).

    Below it, the value in grid units is finite and the value plus any noise below the bound
    2^b of :func:`noise_bound_bits` (any int64 draw, |noise| < 2^63 units, when ``noise_scale``
    is None) rounds to a finite float: max_float - 2^(exponent + b) - 2^exponent, and at most
    max_float * 2^exponent. A grid so coarse that the noise alone can overflow accepts nothing
    (returns -1.0).
    """
    exponent = check_integer("exponent", exponent)
    bits = noise_bound_bits(noise_scale)
    if exponent + bits >= 1024:
        return -1.0
    limit = _LARGEST_FLOAT - math.ldexp(1.0, exponent + bits) - math.ldexp(1.0, exponent)
    if exponent < 0:
        limit = min(limit, math.ldexp(_LARGEST_FLOAT, exponent) - math.ldexp(1.0, exponent))
    return limit


def snap_to_grid(
    values: NDArray[np.float64], exponent: int, *, name: str = "value", noise_scale: float | None = None
) -> NDArray[np.float64]:
    """Round each value to the nearest multiple of 2^exponent (exact in float64: ldexp and rint).

    Values beyond :func:`grid_value_limit` (which would become infinite in grid units, or once
    noise is added) are refused with an :class:`~dpkit.InvalidParameterError` naming ``name``;
    mechanisms snap before drawing any noise, so nothing is drawn for a refused value.
    ``noise_scale`` is the scale (in grid units) of the noise to be added, when known: the limit
    then leaves room for 2^15 scales of it instead of any int64 draw.

    >>> snap_to_grid(np.array([0.3, -1.7]), -2).tolist()
    [0.25, -1.75]
    """
    array = np.asarray(values, dtype=np.float64)
    limit = grid_value_limit(exponent, noise_scale)
    if array.size and not float(np.max(np.abs(array))) <= limit:
        if not np.isfinite(array).all():  # NaN has no magnitude to report, infinity none to compare
            allowed = "must be a finite number (got NaN or infinity)"
        elif limit < 0:
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


def _grid_float(units: int, exponent: int) -> float:
    """units * 2^exponent rounded once to the nearest float (ties to even), saturating at +-max float."""
    largest = int(_LARGEST_FLOAT)  # (2^53 - 1) 2^971, exactly
    bound = largest >> exponent if exponent >= 0 else largest << -exponent  # floor(max_float / 2^exponent)
    if abs(units) > bound:
        # Saturate at +-max float itself, as the numpy path does: a function of n + z alone (clamping
        # to bound 2^exponent gave a smaller value for exponent > 971, where max float is no multiple).
        return _LARGEST_FLOAT if units > 0 else -_LARGEST_FLOAT
    # Python's int -> float and int / int are correctly rounded (and finite within the bound).
    return float(units << exponent) if exponent >= 0 else units / (1 << -exponent)


#: Magnitudes below this fit int64 twice over (the sum of two of them fits).
_INT64_HALF = 2**62
#: Scaling an integer by 2^k with k at least this is exact unless it overflows (no subnormal result).
_SMALLEST_NORMAL_EXPONENT = -1022


def _below(noise: NDArray[Any], bound: int) -> bool:
    """Whether every integer in a non-empty int64 array has magnitude below ``bound``."""
    return -bound < int(noise.min()) and int(noise.max()) < bound


def add_noise_on_grid(snapped: NDArray[np.float64], noise: NDArray[Any], exponent: int) -> NDArray[np.float64]:
    """``snapped + 2^exponent * noise`` for grid multiples ``snapped`` and integer ``noise`` (grid units).

    The exact sum n + z (an integer) is rounded once to the nearest float, saturating at the
    largest finite float: a function of the exact integer sum only, so post-processing of an
    exactly private integer. Shapes broadcast (``snapped`` of one release, ``noise`` of ``count``
    rows). int64 noise below 2^53 (exact as a float) takes numpy's float addition, which rounds
    the exact sum in the same way; int64 noise below 2^62 with grid multiples below 2^62 units
    (and a grid of at least 2^-1022) is summed exactly in int64 and cast once; other noise (Python
    integers from :func:`~dpkit.noise.discrete_laplace_units`) is added in exact integer arithmetic.

    >>> add_noise_on_grid(np.array([0.25, 1.0]), np.array([3, -8]), -2).tolist()
    [1.0, -1.0]
    >>> add_noise_on_grid(np.array([1.0]), np.array([2**1100], dtype=object), 0).tolist()  # saturates
    [1.7976931348623157e+308]
    """
    base = np.asarray(snapped, dtype=np.float64)
    if noise.dtype != object and (noise.size == 0 or _below(noise, _EXACT_FLOAT_INTEGER)):
        with np.errstate(over="ignore"):
            total = base + np.ldexp(noise.astype(np.float64), exponent)
        # A sum beyond the float range rounds to +-inf: the saturating rounding makes it +-max float.
        return np.clip(total, -_LARGEST_FLOAT, _LARGEST_FLOAT)
    units = np.ldexp(base, -exponent)  # finite integer-valued floats (snap_to_grid's limit): exact integers
    if noise.dtype != object and exponent >= _SMALLEST_NORMAL_EXPONENT and _below(noise, _INT64_HALF):
        if units.size == 0 or float(np.max(np.abs(units))) < float(_INT64_HALF):
            # Both below 2^62: the exact sum fits int64; its cast to float64 is one correct rounding,
            # and scaling by 2^exponent >= 2^-1022 is exact (a normal result) or overflows to +-inf.
            exact = units.astype(np.int64) + noise
            with np.errstate(over="ignore"):
                total = np.ldexp(exact.astype(np.float64), exponent)
            return np.clip(total, -_LARGEST_FLOAT, _LARGEST_FLOAT)
    units_b, noise_b = np.broadcast_arrays(units, np.asarray(noise, dtype=object))
    out = np.empty(units_b.shape, dtype=np.float64)
    for index in np.ndindex(units_b.shape):
        out[index] = _grid_float(int(units_b[index]) + int(noise_b[index]), exponent)
    return out
