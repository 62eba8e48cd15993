"""Exact, vectorized samplers of discrete noise.

How the samplers stay exact and fast
------------------------------------
Each sampler is an inverse-CDF or rejection step driven by a uniform U in [0, 1) whose first
53 bits come from one 64-bit word of the random source. The decision ("how many thresholds
c * q^m lie above U", or "is U < exp(-gamma)") is made in float64 with a rigorous error margin
(:data:`_REL_MARGIN`, 64 times the worst-case error of the float operations involved). A draw
that falls within the margin of a threshold (probability about ``scale * 2^-43`` per draw) is
decided exactly instead: more bits of the same U are drawn and the threshold is bracketed with
interval arithmetic (:mod:`dpkit.noise._exact`). The output distributions are therefore
*exactly* the ideal ones, while almost all the work is a handful of numpy passes. Since that
fraction grows with the scale, scales from 2^31 on are drawn in two exact parts
(:func:`geometric_units`): a high part at a scale below 2^31, and low bits by exact rejection
from uniform proposals, whose fast test (one integer comparison) leaves under 2^-30 of the draws
to the exact decision.

Timing: the exact path runs for a vanishing fraction of draws, so its timing leaks very little.
``constant_time=True`` removes it altogether: every draw gets the same fixed work and the
ambiguous draws are decided by the float computation, at a total-variation cost bounded by
:func:`constant_time_tv_bound` (which a mechanism adds to its delta).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InvalidParameterError
from dpkit._search import first_true
from dpkit._validation import check_integer, check_positive
from dpkit.noise._exact import LazyUniform, Threshold, exp_neg_interval, logistic_interval
from dpkit.noise._random import RandomSource, resolve_source

__all__ = [
    "MAX_SCALE",
    "bernoulli_exp",
    "bernoulli_logistic",
    "bernoulli_rational",
    "constant_time_tv_bound",
    "discrete_gaussian",
    "discrete_laplace",
    "discrete_laplace_units",
    "geometric",
    "geometric_units",
    "permutation",
    "uniform_integers",
]

#: Largest scale :func:`geometric` and :func:`discrete_laplace` accept (and the discrete Gaussian's
#: sigma in constant-time mode); larger scales lose the float fast path. :func:`geometric_units`,
#: :func:`discrete_laplace_units` and :func:`discrete_gaussian` take any finite scale.
MAX_SCALE = 2.0**40
# 64 x the worst-case relative error of log, subtraction and product in float64 (about 2^-50).
_REL_MARGIN = 2.0**-44
#: Largest count a constant-time draw returns (its float count is infinite only when U = 0 to 106 bits).
_MAX_COUNT = float(2**62)
_TWO_M53 = 2.0**-53
_BATCH = 1 << 20
_TWO_64 = 1 << 64
# Scales below 2^31 are drawn by geometric / discrete_laplace directly (their float fast path needs
# its exact fallback, about 100 us in Python, for about scale 2^-43 of the draws: 1 in 8192 at 2^30,
# 1 in 4096 at 2^31, 1 in 128 at 2^36); larger ones in two exact parts (geometric_units), which cost
# two more 64-bit words per draw (about 28 ms per 10^6 draws from the OS): below 2^31 the rare
# fallback is cheaper. The mechanisms' noise reaches 2^30 grid units (a little more after rounding),
# so their draws stay on the direct path.
_FAST_SCALE_BITS = 31
# The low part of a two-part draw is assembled in int64 chunks of this many bits.
_CHUNK_BITS = 62
# Two-part draws are int64 when every magnitude is below 2^(this), else Python integers.
_INT64_RESULT_BITS = 62


#: Most draws one call returns (2**40 int64 values are 8 TiB: beyond any machine, refused by name
#: rather than by numpy's "maximum allowed dimension exceeded").
MAX_DRAWS = 2**40


def _check_size(size: int) -> int:
    n = check_integer("size", size, minimum=0)
    if n > MAX_DRAWS:
        raise InvalidParameterError("size", size, f"must be at most 2**40 ({MAX_DRAWS}) draws per call")
    return n


def _check_scale(name: str, value: float) -> float:
    scale = check_positive(name, value)
    if scale > MAX_SCALE:
        raise InvalidParameterError(name, value, f"must be at most {MAX_SCALE:g} (2**40)")
    return scale


def _refined_log_uniform(words: NDArray[np.uint64]) -> NDArray[np.float64]:
    """Constant-time mode: ln U from 53 + 53 bits, U = (r + s 2^-53) 2^-53, in fixed work.

    ``words`` holds two words per draw (first half: r, second half: s).
    """
    half = words.size // 2
    high = (words[:half] >> np.uint64(11)).astype(np.float64)
    low = (words[half:] >> np.uint64(11)).astype(np.float64) * _TWO_M53
    if not half:
        return np.empty(0)
    with np.errstate(divide="ignore"):
        # r = 0 (probability 2^-53): U = s 2^-106, so ln U comes from s alone (ln 0 = -inf only
        # when s = 0 too, probability 2^-106; the count is then capped by the caller).
        return np.where(
            high > 0, np.log(high * _TWO_M53) + np.log1p(low / np.maximum(high, 1.0)), np.log(low * _TWO_M53)
        )


def _uniform_logs(words: NDArray[np.uint64]) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """U's 53-bit prefix r, and float ln of the ends of U's interval [r, r+1) * 2^-53."""
    prefix = (words >> np.uint64(11)).astype(np.float64)  # exact: < 2^53
    with np.errstate(divide="ignore"):
        log_low = np.log(prefix * _TWO_M53)  # -inf when the prefix is 0: always ambiguous
    log_high = np.log((prefix + 1.0) * _TWO_M53)
    return prefix, log_low, log_high


# ---------------------------------------------------------------------------------------------
# Threshold counting: M = #{m >= 1 : U < c * exp(-m / t)}  (geometric and discrete Laplace)
# ---------------------------------------------------------------------------------------------


def _count_thresholds(
    words: NDArray[np.uint64],
    scale: float,
    log_c: float,
    threshold: Callable[[int], Threshold],
    source: RandomSource | None,
) -> NDArray[np.int64]:
    """Vectorized exact count of thresholds c*q^m (q = e^{-1/scale}) above U.

    With y = scale * (ln c - ln U), the count is ceil(y) - 1 = floor(y) for y > 0. ``source``
    None means constant-time mode: ambiguous draws keep their float answer.
    """
    if source is None:
        log_u = _refined_log_uniform(words)
        # Capped below 2^62 before the cast: an infinite count (U = 0 to 106 bits) cast to int64
        # gave INT64_MIN, a negative "geometric" sample.
        return np.minimum(np.maximum(np.floor(scale * (log_c - log_u)), 0.0), _MAX_COUNT).astype(np.int64)
    prefix, log_low, log_high = _uniform_logs(words)
    y_low = scale * (log_c - log_high)
    y_high = scale * (log_c - log_low)
    margin = _REL_MARGIN * scale * (abs(log_c) - log_low) + 1e-300
    low_count = np.maximum(np.floor(y_low - margin), 0.0)
    high_count = np.maximum(np.floor(y_high + margin), 0.0)
    counts = low_count.astype(np.int64)
    ambiguous = np.flatnonzero(low_count != high_count)
    for index in ambiguous:
        uniform = LazyUniform(int(words[index]) >> 11, 53, source)
        # The count is the largest m with U < threshold(m) (thresholds decrease; threshold(0) = 1):
        # one less than the first m >= 1 where U < threshold(m) fails. Searched from the float
        # estimate by galloping and bisecting: when U's 53-bit prefix is 0 (no float upper bound) a
        # linear scan ran once per unit of the answer (37,000 exact comparisons at scale 1e3, a
        # hang at 1e9). The answer is a function of U alone, so the order of comparisons does not
        # change the law.
        above = _rejects(uniform, threshold)
        counts[index] = first_true(above, int(low_count[index]) + 1, lowest=1) - 1
    return counts


def _rejects(uniform: LazyUniform, threshold: Callable[[int], Threshold]) -> Callable[[int], bool]:
    """k -> not U < threshold(k): false up to the count, true above it."""
    return lambda k: not uniform.less_than(threshold(k))


def geometric(
    scale: float, size: int, *, rng: RandomSource | None = None, constant_time: bool = False
) -> NDArray[np.int64]:
    """Exact samples of G on {0, 1, 2, ...} with P(G = m) = (1 - q) q^m, q = exp(-1/scale).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> geometric(2.0, 5, rng=InsecureSeededRandom(0)).tolist()
    [0, 2, 6, 8, 0]
    """
    t = _check_scale("scale", scale)
    n = _check_size(size)
    source = resolve_source(rng)
    t_exact = Fraction(t)

    def threshold(m: int) -> Threshold:
        return exp_neg_interval(Fraction(m) / t_exact)

    words = source.uint64(2 * n if constant_time else n)
    return _count_thresholds(words, t, 0.0, threshold, None if constant_time else source)


def _log_discrete_laplace_c(t: float) -> float:
    """ln c for c = 2 / (1 + e^{-1/t}), to full relative accuracy: -log1p(expm1(-1/t) / 2).

    ln 2 - log1p(e^{-1/t}) subtracts two numbers near ln 2 and kept only ~1e-16 absolute of a
    result ~1/(2t): at t = 1e12 the count t (ln c - ln U) was off by ~1e-4, far outside the
    sampler's margin, so draws near a threshold took the wrong float answer (law error ~2e-10
    per draw at t = 2^30, ~2e-7 near MAX_SCALE).
    """
    return -math.log1p(math.expm1(-1.0 / t) / 2.0)


def _discrete_laplace_constant(t: float) -> tuple[float, Fraction]:
    return _log_discrete_laplace_c(t), Fraction(t)


def discrete_laplace(
    scale: float, size: int, *, rng: RandomSource | None = None, constant_time: bool = False
) -> NDArray[Any]:
    """Exact samples of the discrete Laplace law: P(X = x) = (1 - q)/(1 + q) * q^|x|, q = exp(-1/scale).

    One 64-bit word per sample: its low bit is the sign, its top 53 bits the start of a uniform
    U, and |X| = #{m >= 1 : U < 2 q^m / (1 + q)} (inverse CDF of |X|). Up to scale 2^40
    (:data:`MAX_SCALE`); above it, :func:`discrete_laplace_units` draws the same law (int64 while
    every draw is below 2^62, Python integers beyond), as :func:`discrete_gaussian` does for any
    sigma; constant-time mode stays at most 2^40.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> discrete_laplace(1.0, 6, rng=InsecureSeededRandom(1)).tolist()
    [-1, 0, -2, 0, -1, 1]
    """
    if check_positive("scale", scale) > MAX_SCALE:
        if constant_time:
            raise InvalidParameterError(
                "scale", scale, f"must be at most {MAX_SCALE:g} (2**40) with constant_time=True"
            )
        return discrete_laplace_units(scale, size, rng=rng)
    t = _check_scale("scale", scale)
    n = _check_size(size)
    source = resolve_source(rng)
    log_c, t_exact = _discrete_laplace_constant(t)
    inverse_t = 1 / t_exact

    def threshold(m: int) -> Threshold:
        return exp_neg_interval(Fraction(m) * inverse_t, Fraction(2), inverse_t)

    out = np.empty(n, dtype=np.int64)
    for start in range(0, n, _BATCH):
        stop = min(n, start + _BATCH)
        words = source.uint64((stop - start) * (2 if constant_time else 1))
        magnitude = _count_thresholds(words, t, log_c, threshold, None if constant_time else source)
        negative = (words[: stop - start] & np.uint64(1)).astype(bool)
        out[start:stop] = np.where(negative, -magnitude, magnitude)
    return out


# ---------------------------------------------------------------------------------------------
# Any scale: two exact parts (int64 while the draws stay below 2^62, Python integers beyond)
# ---------------------------------------------------------------------------------------------


def _split_bits(scale: float) -> int:
    """j >= 0 with scale / 2^j < 2^31 (:data:`_FAST_SCALE_BITS`): the number of low bits
    :func:`geometric_units` draws apart from the high part."""
    return max(0, math.frexp(scale)[1] - _FAST_SCALE_BITS)


def _low_chunk(
    exact_scale: Fraction, start: int, stop: int, size: int, source: RandomSource
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Bits start..stop-1 (at most 62 of them) of the low part L, as C = (L >> start) mod 2^(stop - start).

    C has P(C = c) proportional to q^(2^start c) on [0, 2^(stop - start)) (q = exp(-1/scale)), drawn
    by exact rejection: c uniform (the top stop - start bits of a 64-bit word), kept when a uniform U
    is below exp(-2^start c / scale), which is at least a = exp(-2^stop / scale). Words below
    floor(a_low 2^64), a_low a rigorous lower bound of a, accept at once; the others (probability
    about 2^stop / scale, below 2^-30 as stop <= j) are decided exactly against
    :func:`~dpkit.noise._exact.exp_neg_interval`. A rejected draw takes a fresh c and U.

    Also returns the lowest bit of each kept proposal word (never part of c): a fair bit independent
    of C and of everything else drawn, since acceptance depends on the word's top bits only.
    """
    width = stop - start
    floor_bound = exp_neg_interval(Fraction(1 << stop) / exact_scale)(64)[0]
    cut = np.uint64(min((floor_bound.numerator << 64) // floor_bound.denominator, _TWO_64 - 1))
    words = source.uint64(size)
    chunk = (words >> np.uint64(64 - width)).astype(np.int64)
    spare = (words & np.uint64(1)).astype(bool)
    pending = np.arange(size)
    while pending.size:
        tests = source.uint64(pending.size)
        accept = tests < cut
        for index in np.flatnonzero(~accept):
            exponent = Fraction(int(chunk[pending[index]]) << start) / exact_scale
            accept[index] = LazyUniform(int(tests[index]), 64, source).less_than(exp_neg_interval(exponent))
        pending = pending[~accept]
        if pending.size:
            words = source.uint64(pending.size)
            chunk[pending] = (words >> np.uint64(64 - width)).astype(np.int64)
            spare[pending] = (words & np.uint64(1)).astype(bool)
    return chunk, spare


def _fits_int64_result(values: NDArray[Any]) -> NDArray[Any]:
    """Integers (int64 or object) as int64 when every one has magnitude below 2^62
    (:data:`_INT64_RESULT_BITS`), else as an object array of Python integers. A function of the
    values only (post-processing); the 2^62 bound leaves room to add another such int64 without
    overflow."""
    limit = 1 << _INT64_RESULT_BITS
    if values.size and not (-limit < min(values.flat) and max(values.flat) < limit):
        return values if values.dtype == object else values.astype(object)
    return values.astype(np.int64) if values.dtype == object else values


def _two_part(scale: float, bits: int, size: int, source: RandomSource) -> tuple[NDArray[Any], NDArray[np.bool_]]:
    """G = 2^j H + L (j = ``bits`` >= 1) and a fair bit independent of G (see :func:`geometric_units`)."""
    high = geometric(math.ldexp(scale, -bits), size, rng=source)
    exact_scale = Fraction(scale)
    n = high.size
    chunks = []
    spare = np.zeros(n, dtype=bool)
    for start in range(0, bits, _CHUNK_BITS):
        chunk, chunk_spare = _low_chunk(exact_scale, start, min(bits, start + _CHUNK_BITS), n, source)
        chunks.append(chunk)
        if start == 0:
            spare = chunk_spare
    headroom = _INT64_RESULT_BITS - bits
    if len(chunks) == 1 and headroom >= 0 and (n == 0 or int(high.max()) < (1 << headroom)):
        # H < 2^(62 - j) and L < 2^j: (H << j) | L = 2^j H + L < 2^62, exact in int64.
        fast: NDArray[np.int64] = (high << np.int64(bits)) | chunks[0]
        return fast, spare
    # The same draws, assembled in Python integers.
    total = high.astype(object) << bits
    for index, chunk in enumerate(chunks):
        total = total + (chunk.astype(object) << (index * _CHUNK_BITS))
    return _fits_int64_result(total), spare


def geometric_units(scale: float, size: int, rng: RandomSource | None = None) -> NDArray[Any]:
    """Exact one-sided geometric noise, P(G = m) = (1 - q) q^m with q = exp(-1/scale), for any scale.

    Below 2^31 this is :func:`geometric` (int64, the same draws). From 2^31 on, with j the smallest
    integer with scale / 2^j < 2^31, G = 2^j H + L is drawn in two independent parts. For
    P(G = 2^j h + l) = (1 - q) q^(2^j h) q^l, 0 <= l < 2^j, factorises: H is geometric with ratio
    q^(2^j) = exp(-1/(scale 2^-j)), drawn by :func:`geometric` at the exact float scale scale 2^-j
    (below 2^31, where its exact fallback serves at most about 1 draw in 4,000), and L, independent of H, has
    P(L = l) proportional to q^l on [0, 2^j). Likewise L's chunks of 62 bits are independent, each
    with P(C = c) proportional to q^(2^start c): each is drawn by exact rejection from a uniform
    proposal (:func:`_low_chunk`, acceptance above 1 - 2^-30). The law is exactly the geometric law
    of this scale: no rounding.

    The result is int64 when every draw is below 2^62 (always in practice up to scales near 2^56),
    else an object array of Python integers: G = (H << j) | L is assembled in int64 when
    max(H) < 2^(62 - j) (then G < 2^62, no overflow), otherwise in Python integers from the same
    draws. The dtype is a function of the draws only.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> geometric_units(2.0, 5, InsecureSeededRandom(0)).tolist()  # below 2^31: geometric's draws
    [0, 2, 6, 8, 0]
    >>> geometric_units(2.0**40, 3, InsecureSeededRandom(0)).dtype
    dtype('int64')
    >>> draws = geometric_units(2.0**70, 3, InsecureSeededRandom(0))
    >>> draws.dtype, all(isinstance(g, int) and g >= 0 for g in draws)
    (dtype('O'), True)
    """
    source = resolve_source(rng)
    bits = _split_bits(scale)
    if bits == 0:
        return geometric(scale, size, rng=source)
    return _two_part(scale, bits, size, source)[0]


def discrete_laplace_units(scale: float, size: int, rng: RandomSource | None = None) -> NDArray[Any]:
    """Exact discrete Laplace noise, P(X = x) = (1 - q) / (1 + q) q^|x| with q = exp(-1/scale), for any scale.

    Below 2^31 this is :func:`discrete_laplace` (int64, the same draws). From 2^31 on, X = S G with
    G drawn as in :func:`geometric_units` at this scale and S = +-1 the fair bit independent of G
    that comes with it, the pair (S, G) = (-1, 0) rejected and both redrawn (probability
    (1 - q) / 2, about 1 / (2 scale)). A kept pair gives x != 0 with probability (1 - q) q^|x| / 2
    and x = 0 with (1 - q) / 2, both proportional to q^|x|: conditioned on acceptance, exactly the
    discrete Laplace law. Each coordinate is the first accepted pair of its own independent sequence,
    so coordinates stay independent. int64 when every |x| is below 2^62 (as for
    :func:`geometric_units`), else Python integers.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> discrete_laplace_units(1.0, 6, InsecureSeededRandom(1)).tolist()  # below 2^31: discrete_laplace's draws
    [-1, 0, -2, 0, -1, 1]
    >>> abs(int(discrete_laplace_units(2.0**90, 1, InsecureSeededRandom(1))[0])) < 2**110
    True
    """
    source = resolve_source(rng)
    bits = _split_bits(scale)
    if bits == 0:
        return discrete_laplace(scale, size, rng=source)
    magnitude, negative = _two_part(scale, bits, size, source)
    redo = np.flatnonzero(negative & (magnitude == 0))
    while redo.size:
        again, again_negative = _two_part(scale, bits, redo.size, source)
        if again.dtype == object and magnitude.dtype != object:
            magnitude = magnitude.astype(object)
        magnitude[redo] = again
        negative[redo] = again_negative
        redo = redo[again_negative & (again == 0)]
    # |G| < 2^62 in int64, so -G cannot overflow; an object magnitude is checked for the int64 range.
    signed: NDArray[Any] = np.where(negative, -magnitude, magnitude)
    return _fits_int64_result(signed) if signed.dtype == object else signed


# ---------------------------------------------------------------------------------------------
# Bernoulli trials
# ---------------------------------------------------------------------------------------------


def _accept_below_exp(
    words: NDArray[np.uint64],
    gamma: NDArray[np.float64],
    gamma_error: NDArray[np.float64],
    exact_gamma: Callable[[int], Fraction],
    source: RandomSource | None,
) -> NDArray[np.bool_]:
    """Exact U < exp(-gamma) for each draw; ``gamma_error`` bounds the float error of ``gamma``."""
    if source is None:
        return _refined_log_uniform(words) < -gamma
    _prefix, log_low, log_high = _uniform_logs(words)
    error_u = _REL_MARGIN * np.abs(log_low) + 1e-300
    total = error_u + gamma_error
    sure_accept = log_high + total <= -gamma
    sure_reject = log_low - total >= -gamma
    accept = sure_accept.copy()
    for index in np.flatnonzero(~(sure_accept | sure_reject)):
        uniform = LazyUniform(int(words[index]) >> 11, 53, source)
        accept[index] = uniform.less_than(exp_neg_interval(exact_gamma(int(index))))
    return accept


def bernoulli_exp(
    x: float | NDArray[np.float64], size: int | None = None, *, rng: RandomSource | None = None
) -> NDArray[np.bool_]:
    """Exact Bernoulli(exp(-x)) trials for x >= 0 (x a scalar with ``size``, or an array).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> bernoulli_exp(0.5, 8, rng=InsecureSeededRandom(2)).astype(int).tolist()
    [1, 1, 0, 1, 1, 0, 1, 1]
    """
    if isinstance(x, bool | np.bool_ | str | bytes):
        raise InvalidParameterError("x", x, "must be a finite number >= 0 (or an array of them), not a bool or text")
    try:
        raw = np.asarray(x)
        gamma = raw.astype(np.float64) if raw.dtype.kind in "iuf" else None
    except (TypeError, ValueError):
        gamma = None
    if gamma is None or not np.all(np.isfinite(gamma)) or np.any(gamma < 0):
        raise InvalidParameterError("x", x, "must be finite and >= 0 (numbers only, no bools or text)")
    if size is not None:
        if gamma.ndim != 0:
            raise InvalidParameterError("size", size, "is only allowed with a scalar x")
        gamma = np.full(_check_size(size), float(gamma))
    gamma = gamma.ravel()
    source = resolve_source(rng)
    words = source.uint64(gamma.size)
    return _accept_below_exp(words, gamma, np.zeros_like(gamma), lambda i: Fraction(float(gamma[i])), source)


def bernoulli_rational(p: Fraction | int | str, size: int, *, rng: RandomSource | None = None) -> NDArray[np.bool_]:
    """Exact Bernoulli(p) trials for a rational p in [0, 1] (a Fraction, an int or a string like '1/3').

    >>> from dpkit.noise import InsecureSeededRandom
    >>> bernoulli_rational("1/3", 9, rng=InsecureSeededRandom(3)).astype(int).tolist()
    [1, 1, 0, 0, 1, 0, 0, 1, 0]
    """
    try:
        probability = Fraction(p) if not isinstance(p, float | bool | np.bool_) else None
    except (TypeError, ValueError, ZeroDivisionError):
        probability = None
    if probability is None or not 0 <= probability <= 1:
        raise InvalidParameterError("p", p, "must be a rational number in [0, 1] (Fraction, int or 'a/b')")
    n = _check_size(size)
    if probability == 1:
        return np.ones(n, dtype=bool)
    source = resolve_source(rng)
    words = source.uint64(n)
    # U = words / 2^64 + (later bits); U < p is decided unless words == floor(p 2^64).
    cut = (probability.numerator << 64) // probability.denominator
    result = words < np.uint64(cut)
    for index in np.flatnonzero(words == np.uint64(cut)):
        uniform = LazyUniform(int(words[index]), 64, source)
        result[index] = uniform.less_than(lambda _precision: (probability, probability))
    return result


def _exact_rational(value: object) -> Fraction | None:
    """``value`` (a Fraction, an int or a finite float, taken exactly; not a bool) as a Fraction."""
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int | np.integer):
        return Fraction(int(value))
    if isinstance(value, float | np.floating) and math.isfinite(value):
        return Fraction(float(value))
    return None


def bernoulli_logistic(
    epsilon: Fraction | int | float, ratio: Fraction | int | float, size: int, *, rng: RandomSource | None = None
) -> NDArray[np.bool_]:
    """Exact Bernoulli(1 / (1 + ratio e^-epsilon)) trials, for epsilon >= 0 and a rational ratio > 0.

    A float ``epsilon`` or ``ratio`` is taken as the exact binary value it holds. Each trial
    compares a uniform U, known first by one 64-bit word w (U in [w, w+1) 2^-64), with the
    threshold's rigorous bounds [lo, hi] (:func:`dpkit.noise._exact.logistic_interval`); only
    words with lo <= (w or w+1) 2^-64 <= hi draw more bits. k-ary randomized response's "keep"
    coin is ratio = k - 1.

    >>> from fractions import Fraction
    >>> from dpkit.noise import InsecureSeededRandom
    >>> bernoulli_logistic(Fraction(1), Fraction(3, 2), 6, rng=InsecureSeededRandom(0)).astype(int).tolist()
    [1, 1, 1, 1, 0, 0]
    """
    eps = _exact_rational(epsilon)
    if eps is None or eps < 0:
        raise InvalidParameterError("epsilon", epsilon, "must be a finite real number >= 0 (Fraction, int or float)")
    factor = _exact_rational(ratio)
    if factor is None or factor <= 0:
        raise InvalidParameterError("ratio", ratio, "must be a positive rational number (Fraction, int or float)")
    n = _check_size(size)
    source = resolve_source(rng)
    threshold = logistic_interval(eps, factor)
    low, high = threshold(96)
    sure_below = (low.numerator * _TWO_64) // low.denominator  # w + 1 <= lo 2^64  <=>  w < floor(lo 2^64)
    sure_above = -((-high.numerator * _TWO_64) // high.denominator)  # w >= ceil(hi 2^64)
    words = source.uint64(n)
    result = words < np.uint64(min(sure_below, _TWO_64 - 1))
    # Words in [sure_below, sure_above) draw more bits. sure_above can be 2^64 (p within 2^-64 of 1),
    # which no uint64 holds: then every word not already accepted, the top one included, is ambiguous.
    undecided = ~result if sure_above >= _TWO_64 else ~result & (words < np.uint64(sure_above))
    ambiguous = np.flatnonzero(undecided)
    for index in ambiguous:
        uniform = LazyUniform(int(words[index]), 64, source)
        result[index] = uniform.less_than(threshold)
    return result


# ---------------------------------------------------------------------------------------------
# Discrete Gaussian (Canonne, Kamath & Steinke 2020, Algorithm 3)
# ---------------------------------------------------------------------------------------------


def discrete_gaussian(
    sigma: float, size: int, *, rng: RandomSource | None = None, constant_time: bool = False
) -> NDArray[Any]:
    """Exact samples of the discrete Gaussian N_Z(0, sigma^2): P(X = x) proportional to exp(-x^2 / (2 sigma^2)).

    Canonne, Kamath & Steinke (2020), Algorithm 3: draw Y from the discrete Laplace law of
    scale t = floor(sigma) + 1 and keep it with probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)).
    Both steps are exact (see the module docstring), for every finite sigma > 0. Below
    sigma = 2^31 (and in constant-time mode, up to sigma = 2^40, :data:`MAX_SCALE`) Y comes from
    :func:`discrete_laplace`; from 2^31 on, from :func:`discrete_laplace_units` (two exact parts:
    the one-part sampler's exact fallback served 1 draw in 16 at sigma 2^39), with the acceptance
    exponent bracketed against an exact rational (:func:`_discrete_gaussian_any_sigma`). Which
    exact sampler of the same law serves which sigma changes the draws, never the law. The result
    is int64 while every draw is below 2^62 in magnitude (the two-part samplers' rule), else an
    object array of Python integers (in practice from sigma ~ 2^57 on). ``constant_time=True`` is
    available up to sigma = 2^40.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> discrete_gaussian(2.0, 6, rng=InsecureSeededRandom(4)).tolist()
    [0, -2, 0, -1, 3, -1]
    >>> draws = discrete_gaussian(1e20, 4, rng=InsecureSeededRandom(4))
    >>> draws.dtype, all(abs(int(x)) < 10**22 for x in draws)
    (dtype('O'), True)
    """
    sig = check_positive("sigma", sigma)
    n = _check_size(size)
    source = resolve_source(rng)
    if sig > MAX_SCALE and constant_time:
        raise InvalidParameterError("sigma", sigma, f"must be at most {MAX_SCALE:g} (2**40) with constant_time=True")
    if sig > MAX_SCALE or (not constant_time and sig >= math.ldexp(1.0, _FAST_SCALE_BITS)):
        return _discrete_gaussian_any_sigma(sig, n, source)
    # Any integer t >= 1 gives the exact law (the acceptance cancels Y's e^{-|y|/t}); floor(sigma) + 1
    # keeps acceptance high, capped at the discrete Laplace sampler's largest scale (sigma up to 2**40).
    t = min(math.floor(sig) + 1, int(MAX_SCALE))
    sigma_sq = sig * sig
    sigma_sq_exact = Fraction(sig) ** 2
    shift = sigma_sq / t
    shift_exact = sigma_sq_exact / t
    out = np.empty(n, dtype=np.int64)
    filled = 0
    acceptance = 0.5
    while filled < n:
        wanted = n - filled
        batch = min(_BATCH, int(wanted / acceptance * 1.05) + 64)
        candidates = discrete_laplace(float(t), batch, rng=source, constant_time=constant_time)
        magnitude = np.abs(candidates).astype(np.float64)
        distance = magnitude - shift
        with np.errstate(divide="ignore", invalid="ignore"):
            # (sigma^2 underflows to 0 below sigma ~ 1e-162: then gamma is +inf for |Y| > 0, a sure
            # rejection, and 0/0 at Y = 0, where the true gamma, sigma^2 / (2 t^2), is below 1e-300)
            gamma = distance * distance / (2.0 * sigma_sq)
            gamma_error = _REL_MARGIN * ((magnitude + shift) ** 2 / (2.0 * sigma_sq) + gamma) + 1e-300
        unknown = np.isnan(gamma)
        gamma[unknown], gamma_error[unknown] = 0.0, 1e-300

        def exact_gamma(index: int, _c: NDArray[np.int64] = candidates) -> Fraction:
            d = abs(int(_c[index])) - shift_exact
            return d * d / (2 * sigma_sq_exact)

        accept = _accept_below_exp(
            source.uint64(batch * (2 if constant_time else 1)),
            gamma,
            gamma_error,
            exact_gamma,
            None if constant_time else source,
        )
        kept = candidates[accept][:wanted]
        out[filled : filled + kept.size] = kept
        filled += kept.size
        acceptance = max(0.05, float(accept.mean())) if batch else acceptance
    return out


def _over_float(numerators: NDArray[Any], denominator: float) -> NDArray[np.float64]:
    """numerator / denominator in float64 for Python integers: each integer rounded once to a float
    (int -> float is correctly rounded), then divided (one more rounding)."""
    try:
        quotient: NDArray[np.float64] = numerators.astype(np.float64) / denominator
    except OverflowError:
        # An integer beyond the float range (a proposal above 2^1024: likely only for sigma near the
        # largest float; below e^-(2^16) at the mechanisms' sigmas, under 2^1007): each quotient
        # rounded once from the exact rational instead.
        exact = Fraction(denominator)
        quotient = np.array([float(Fraction(int(v)) / exact) for v in numerators], dtype=np.float64)
    return quotient


def _discrete_gaussian_any_sigma(sig: float, n: int, source: RandomSource) -> NDArray[Any]:
    """CKS Algorithm 3 for sigma >= 2^31 (outside constant-time mode): exact at any finite sigma.

    The proposal Y is discrete Laplace of scale t (P(Y = y) proportional to e^{-|y|/t}) and Y is kept
    with probability exp(-gamma), gamma = (|y| - sigma^2/t)^2 / (2 sigma^2). Since
    -|y|/t - gamma = -y^2 / (2 sigma^2) - sigma^2 / (2 t^2), a kept Y has P(Y = y) proportional to
    exp(-y^2 / (2 sigma^2)) for *any* real t > 0 (CKS's proof does not use t being an integer).
    t is CKS's floor(sigma) + 1, as the nearest float where that integer is not one (sigma >= 2^53).
    Y comes from :func:`discrete_laplace_units` at the float t (its exact law). Each acceptance is an
    exact Bernoulli(exp(-gamma)) trial (:func:`_accept_below_exp`): gamma is bracketed in float,
    computed as ((|y| / sigma) - sigma / t)^2 / 2 so that nothing overflows (sigma^2 does beyond
    1e154), with a rigorous error bound, and a draw within that bound of its threshold is decided
    against the exact rational gamma, from sigma and t taken as the exact binary values of the floats.
    Acceptance probability: (1 - q) / (1 + q) e^{-sigma^2 / (2 t^2)} sum_y e^{-y^2 / (2 sigma^2)}
    with q = e^{-1/t}, which tends to sqrt(pi / 2) e^{-1/2} = 0.760 (1.32 proposals per draw).
    Proposals and output are int64 while the proposals are (every |y| below 2^62, so |y| and the
    kept values fit; an int64 |y| converts to float64 with one correct rounding, as a Python integer
    does), Python integers otherwise; the output is int64 when every kept value fits.
    """
    t = float(math.floor(sig) + 1)
    sigma_exact = Fraction(sig)
    two_sigma_sq_exact = 2 * sigma_exact * sigma_exact
    shift_exact = sigma_exact * sigma_exact / Fraction(t)
    ratio = sig / t  # sigma^2 / t in units of sigma (relative error 2^-53)
    out: NDArray[Any] = np.empty(n, dtype=np.int64)
    filled = 0
    acceptance = 0.75
    while filled < n:
        wanted = n - filled
        batch = min(_BATCH, int(wanted / acceptance * 1.05) + 64)
        candidates = discrete_laplace_units(t, batch, source)
        magnitude = np.abs(candidates)
        # x = |y| / sigma carries at most two roundings (2^-53 relative each) and ratio one, so the
        # float distance x - ratio is off by at most about 3 2^-53 (x + ratio) and gamma by about
        # 3 2^-53 (x + ratio)^2 + 2^-53 gamma: the bound below is 2^-44 times that (over 80x room).
        x = _over_float(magnitude, sig)
        distance = x - ratio
        with np.errstate(over="ignore"):
            gamma = distance * distance / 2.0
            gamma_error = _REL_MARGIN * ((x + ratio) ** 2 / 2.0 + gamma) + 1e-300
        # Past the float range (|y| above 1e154 sigma) gamma is at least 1e308: a lower bound with no
        # error term still rejects exactly (U >= e^-1e308 >= e^-gamma), and never accepts in float.
        overflowed = ~(np.isfinite(gamma) & np.isfinite(gamma_error))
        gamma[overflowed], gamma_error[overflowed] = 1e308, 0.0

        def exact_gamma(index: int, _m: NDArray[Any] = magnitude) -> Fraction:
            d = int(_m[index]) - shift_exact
            return d * d / two_sigma_sq_exact

        accept = _accept_below_exp(source.uint64(batch), gamma, gamma_error, exact_gamma, source)
        kept = candidates[accept][:wanted]
        if kept.dtype == object and out.dtype != object:
            out = out.astype(object)  # a proposal left int64: Python integers from here on
        out[filled : filled + kept.size] = kept
        filled += kept.size
        acceptance = max(0.05, float(accept.mean()))
    return _fits_int64_result(out)


# ---------------------------------------------------------------------------------------------
# Uniform choices
# ---------------------------------------------------------------------------------------------


def uniform_integers(upper: int, size: int, *, rng: RandomSource | None = None) -> NDArray[np.int64]:
    """Exact uniform integers in {0, ..., upper - 1} (rejection sampling on 64-bit words).

    >>> from dpkit.noise import InsecureSeededRandom
    >>> uniform_integers(6, 5, rng=InsecureSeededRandom(5)).tolist()
    [4, 3, 0, 2, 3]
    """
    k = check_integer("upper", upper, minimum=1)
    if k > 2**62:
        raise InvalidParameterError("upper", upper, "must be at most 2**62")
    n = _check_size(size)
    source = resolve_source(rng)
    limit = np.uint64((2**64 // k) * k - 1)  # accept words <= limit: an exact multiple of k values
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        words = source.uint64(n - filled + 8)
        good = words[words <= limit][: n - filled]
        out[filled : filled + good.size] = (good % np.uint64(k)).astype(np.int64)
        filled += good.size
    return out


def permutation(n: int, *, rng: RandomSource | None = None) -> NDArray[np.int64]:
    """An exactly uniform random permutation of 0..n-1 (sort by random 64-bit keys; redraw on ties)."""
    count = check_integer("n", n, minimum=0)
    source = resolve_source(rng)
    while True:
        keys = source.uint64(count)
        order = np.argsort(keys, kind="stable")
        if count < 2 or np.all(np.diff(keys[order]) != 0):
            return order.astype(np.int64)


def constant_time_tv_bound(scale: float, kind: str = "discrete_laplace") -> float:
    """Upper bound on the total-variation distance, per output, of constant-time sampling from exact.

    In constant-time mode each decision uses ln U computed from 106 random bits in fixed work,
    with relative error below the margin m = 2^-44. A decision can differ from the exact one
    only if U < 2^-40 (probability 2^-40) or the exact statistic lies within the float error
    of a threshold:
    - counting (geometric, discrete Laplace): y = t (ln c - ln U) has density at most 1/t and is
      off by at most w = m t (|ln c| + 40 ln 2); summing over the integers gives
      2 w c e^{w/t} (1 + 1/t).
    - an acceptance test U < exp(-gamma): ln U and gamma are off by at most
      w = m (40 ln 2 + 3 gamma + 1); P(|ln U + gamma| <= w) <= 2 w e^w. For the discrete
      Gaussian, gamma <= (|Y| + sigma)^2 / (2 sigma^2) is bounded in expectation by
      (2 E[Y^2] + 2 sigma^2) / (2 sigma^2) <= 1 + 4 t^2 / sigma^2 <= 17, and at most 4 candidates are
      drawn per output on average (acceptance >= 1/4, Canonne et al. 2020, Sec. 5).
    """
    t = _check_scale("scale", scale)
    if kind not in ("discrete_laplace", "geometric", "discrete_gaussian"):
        raise InvalidParameterError("kind", kind, "must be 'discrete_laplace', 'geometric' or 'discrete_gaussian'")
    tail = 2.0**-40
    if kind == "geometric":
        log_c = 0.0
    else:
        laplace_scale = float(math.floor(t) + 1) if kind == "discrete_gaussian" else t
        log_c = _log_discrete_laplace_c(laplace_scale)
        t = laplace_scale
    window = _REL_MARGIN * t * (abs(log_c) + 40 * math.log(2.0))
    per_draw = tail + 2 * window * math.exp(log_c) * math.exp(window / t) * (1 + 1 / t)
    if kind == "discrete_gaussian":
        accept_window = _REL_MARGIN * (40 * math.log(2.0) + 3 * 17 + 1)
        per_draw = 4 * (per_draw + tail + 2 * accept_window * math.exp(accept_window))
    return min(1.0, per_draw)
