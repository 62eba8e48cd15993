"""Exact coins the local randomizers need beyond :mod:`dpkit.noise`.

* :func:`bernoulli_dyadic`: Bernoulli(t) for an array of float probabilities t (every float is a
  dyadic rational, so U < t is decided exactly on the 64-bit word, with more bits drawn only when
  the word ties with floor(t 2^64)).

The piecewise mechanism's "centre" coin, Bernoulli(1 / (1 + r e^-eps)), is
:func:`dpkit.noise.bernoulli_logistic`.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from dpkit.noise import RandomSource
from dpkit.noise._exact import LazyUniform, fraction_interval

__all__ = ["bernoulli_dyadic"]


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
