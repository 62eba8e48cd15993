"""Exact coins the local randomizers need beyond :mod:`dpkit.noise`.

* :func:`bernoulli_dyadic`: Bernoulli(t) for an array of float probabilities t (every float is a
  dyadic rational, so U < t is decided exactly on the 64-bit word, with more bits drawn only when
  the word ties with floor(t 2^64)).
* :func:`bernoulli_logistic`: Bernoulli(1 / (1 + r e^-eps)) for a rational r (the piecewise
  mechanism's "centre" coin), decided like :func:`dpkit.mechanisms.randomized_response.bernoulli_keep`
  with mpmath interval bounds on the threshold.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
from numpy.typing import NDArray

from dpkit.noise import RandomSource
from dpkit.noise._exact import _LOCK, LazyUniform, _mpf_tuple_to_fraction, fraction_interval

__all__ = ["bernoulli_dyadic", "bernoulli_logistic"]

_TWO_64 = 1 << 64


def bernoulli_dyadic(probabilities: NDArray[np.float64], source: RandomSource) -> NDArray[np.bool_]:
    """Exact Bernoulli(t_i) for each float t_i in [0, 1] (one 64-bit word per trial, rarely more).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> bernoulli_dyadic(np.array([0.0, 1.0, 0.5, 0.5]), InsecureSeededRandom(0)).tolist()
    [False, True, True, True]
    """
    t = np.asarray(probabilities, dtype=np.float64).ravel()
    words = source.uint64(t.size)
    scaled = np.floor(np.ldexp(t, 64))  # exact: scaling by 2^64 and flooring a float are exact
    full = scaled >= 2.0**64
    cut = np.where(full, 0.0, scaled).astype(np.uint64)
    result = full | (words < cut)
    for index in np.flatnonzero(~full & (words == cut)):
        uniform = LazyUniform(int(words[index]), 64, source)
        result[index] = uniform.less_than(fraction_interval(Fraction(float(t[index]))))
    return result


def _logistic_interval(epsilon: Fraction, ratio: Fraction, precision: int) -> tuple[Fraction, Fraction]:
    iv = mpmath.iv
    with _LOCK:  # mpmath's interval precision is a global setting
        saved = iv.prec
        try:
            iv.prec = precision + 32
            exponent = iv.mpf(epsilon.numerator) / iv.mpf(epsilon.denominator)
            factor = iv.mpf(ratio.numerator) / iv.mpf(ratio.denominator)
            low, high = (1 / (1 + factor * iv.exp(-exponent)))._mpi_
        finally:
            iv.prec = saved
    return _mpf_tuple_to_fraction(low), _mpf_tuple_to_fraction(high)


def bernoulli_logistic(epsilon: Fraction, ratio: Fraction, size: int, source: RandomSource) -> NDArray[np.bool_]:
    """Exact Bernoulli(1 / (1 + ratio e^-epsilon)) trials (ratio a positive rational).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> bernoulli_logistic(Fraction(1), Fraction(3, 2), 6, InsecureSeededRandom(0)).astype(int).tolist()
    [1, 1, 1, 1, 0, 0]
    """
    low, high = _logistic_interval(epsilon, ratio, 96)
    sure_below = (low.numerator * _TWO_64) // low.denominator
    sure_above = -((-high.numerator * _TWO_64) // high.denominator)
    words = source.uint64(size)
    result = words < np.uint64(min(sure_below, _TWO_64 - 1))
    ambiguous = np.flatnonzero(~result & (words < np.uint64(min(sure_above, _TWO_64 - 1))))
    for index in ambiguous:
        uniform = LazyUniform(int(words[index]), 64, source)
        result[index] = uniform.less_than(lambda precision: _logistic_interval(epsilon, ratio, precision))
    return result
