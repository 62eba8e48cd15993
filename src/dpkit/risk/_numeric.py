"""Float arithmetic at the ends of the range: Python ints beyond floats, products that would overflow midway.

A public function of :mod:`dpkit.risk` accepts any Python int as a count (``10**400``) and any
positive float as a parameter (``5e-324`` to ``1.8e308``): ``float(k)`` raises OverflowError, and a
product like ``epsilon0 * D / s`` can overflow or underflow although its value is representable.
These helpers round such values once, to ``inf`` beyond the float range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

__all__ = ["rational_to_float", "scaled_product", "sqrt_count"]


def rational_to_float(value: Fraction) -> float:
    """A non-negative rational (an exact product of floats and ints) rounded once; inf beyond the float range."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def sqrt_count(count: int) -> tuple[float, int]:
    """``(m, s)`` with ``sqrt(count) = m 2^s`` (``m`` a float), for any int ``count >= 1``.

    ``math.sqrt(10**400)`` raises OverflowError (the int is converted to float first); here the count
    is shifted by an even number of bits to the float range (a relative error below 2^-900).
    """
    shift = max(0, (count.bit_length() - 1000) // 2)
    return math.sqrt(count >> (2 * shift)), shift


def scaled_product(numerators: Iterable[float], denominators: Iterable[float] = (), exponent: int = 0) -> float:
    """``prod(numerators) / prod(denominators) * 2^exponent`` for positive floats, inf allowed in ``numerators``.

    Mantissas and exponents are multiplied separately, so nothing overflows or underflows before the
    final rounding (inf beyond the float range, a subnormal or 0.0 below it). At most a few factors:
    each adds a rounding of the mantissa product.
    """
    mantissa = 1.0
    for factor in numerators:
        if math.isinf(factor):
            return math.inf
        m, e = math.frexp(factor)
        mantissa, exponent = mantissa * m, exponent + e
    for factor in denominators:
        m, e = math.frexp(factor)
        mantissa, exponent = mantissa / m, exponent - e
    try:
        return math.ldexp(mantissa, exponent)
    except OverflowError:
        return math.inf
