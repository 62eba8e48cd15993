"""Exact comparisons of a uniform variable with real thresholds, for the rare ambiguous draws.

The vectorized samplers decide almost every draw with float64 arithmetic and a rigorous error
margin. When a draw falls inside that margin (probability ~1e-12 per draw), it comes here: the
uniform U is known by a prefix of random bits, the threshold by a rigorous interval
(mpmath's interval arithmetic), and both are refined until the comparison is decided. The
result is the exact outcome of "U < threshold" for the infinitely precise U, so the samplers'
output distributions are exact.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from fractions import Fraction

from dpkit._lazy import LazyModule
from dpkit.noise._random import RandomSource

mpmath = LazyModule("mpmath")

__all__ = ["LazyUniform", "exp_neg_interval", "fraction_interval", "logistic_interval"]

# An interval threshold: given a working precision in bits, return (low, high) Fractions with
# low <= threshold <= high.
Threshold = Callable[[int], tuple[Fraction, Fraction]]


class LazyUniform:
    """A uniform U in [0, 1) of which only the first ``bits`` binary digits have been drawn."""

    __slots__ = ("bits", "prefix", "source")

    def __init__(self, prefix: int, bits: int, source: RandomSource) -> None:
        self.prefix = int(prefix)
        self.bits = bits
        self.source = source

    def _extend(self) -> None:
        word = int(self.source.uint64(1)[0])
        self.prefix = (self.prefix << 64) | word
        self.bits += 64

    def less_than(self, threshold: Threshold) -> bool:
        """Decide U < threshold exactly, drawing more bits of U as needed."""
        while True:
            low, high = threshold(self.bits + 64)
            scale = 1 << self.bits
            u_low = Fraction(self.prefix, scale)
            u_high = Fraction(self.prefix + 1, scale)
            if u_high <= low:
                return True
            if u_low >= high:
                return False
            self._extend()


_LOCK = threading.Lock()


def _below(raw: tuple[int, int, int, int], precision: int) -> bool:
    """Whether a non-negative mpf (sign, mantissa, exponent, bits) is below 2^-precision."""
    sign, mantissa, exponent, bits = raw
    return not sign and (mantissa == 0 or int(exponent) + int(bits) < -precision)


def _mpf_tuple_to_fraction(raw: tuple[int, int, int, int]) -> Fraction:
    sign, mantissa, exponent, _bits = raw
    value = Fraction(int(mantissa)) * (Fraction(2) ** int(exponent))
    return -value if sign else value


def exp_neg_interval(x: Fraction, factor: Fraction = Fraction(1), divisor_exp_neg: Fraction | None = None) -> Threshold:
    """Interval for ``factor * exp(-x) / (1 + exp(-divisor_exp_neg))`` (the last part optional).

    Computed with mpmath interval arithmetic, so the returned bounds are rigorous.
    """

    def interval(precision: int) -> tuple[Fraction, Fraction]:
        iv = mpmath.iv
        with _LOCK:  # mpmath's interval precision is a global setting
            saved = iv.prec
            try:
                iv.prec = precision + 32
                exponent = iv.mpf(x.numerator) / iv.mpf(x.denominator)
                value = iv.exp(-exponent) * (iv.mpf(factor.numerator) / iv.mpf(factor.denominator))
                if divisor_exp_neg is not None:
                    inner = iv.mpf(divisor_exp_neg.numerator) / iv.mpf(divisor_exp_neg.denominator)
                    value = value / (1 + iv.exp(-inner))
                low, high = value._mpi_
            finally:
                iv.prec = saved
        # An endpoint below 2^-precision is replaced by a coarser bound on the safe side (0 for the
        # lower, 2^-precision for the upper): comparisons with a U known to ``precision - 64`` bits
        # cannot tell them apart, and converting e^-(10^300) exactly would not finish.
        tiny = Fraction(1, 1 << precision)
        return (
            Fraction(0) if _below(low, precision) else _mpf_tuple_to_fraction(low),
            tiny if _below(high, precision) else _mpf_tuple_to_fraction(high),
        )

    return interval


def logistic_interval(x: Fraction, ratio: Fraction) -> Threshold:
    """Interval for ``1 / (1 + ratio * exp(-x))`` (mpmath interval arithmetic: rigorous bounds)."""

    def interval(precision: int) -> tuple[Fraction, Fraction]:
        iv = mpmath.iv
        with _LOCK:  # mpmath's interval precision is a global setting
            saved = iv.prec
            try:
                iv.prec = precision + 32
                exponent = iv.mpf(x.numerator) / iv.mpf(x.denominator)
                factor = iv.mpf(ratio.numerator) / iv.mpf(ratio.denominator)
                low, high = (1 / (1 + factor * iv.exp(-exponent)))._mpi_
            finally:
                iv.prec = saved
        return _mpf_tuple_to_fraction(low), _mpf_tuple_to_fraction(high)

    return interval


def fraction_interval(value: Fraction) -> Threshold:
    """A threshold known exactly."""
    return lambda _precision: (value, value)
