"""The exponential mechanism (McSherry & Talwar 2007), sampled exactly on a public score grid.

Selection mechanisms release one element of a finite candidate set, chosen to have a high
score s(D, o), where the score of every candidate moves by at most the sensitivity Delta
between neighbouring datasets. This module holds the exponential mechanism and the pieces the
other selection mechanisms (:mod:`.noisy_max`, :mod:`.sparse_vector`) share:

Floating-point safety (Mironov 2012; Ilvento 2020, "Implementing the exponential mechanism
with base-2 differential privacy"). A textbook implementation computes softmax weights in
float and samples with a float CDF; the released law is then only close to the one the proof
is about, and the gap can be exploited. Here:

1. Scores are rounded to the public grid 2^k with k = floor(log2 Delta) - 20, from the
   sensitivity only (:class:`SelectionGrid`), and handled as integers n_o. Rounding moves a score
   by at most half a grid step, so neighbouring integer scores differ by at most
   ``U = floor(Delta / 2^k) + 1`` grid units: the mechanism is calibrated to the effective
   sensitivity ``U * 2^k <= Delta + 2^k <= (1 + 2^-20) Delta``, at every epsilon. (The grid must
   not coarsen with the noise: on a grid coarser than Delta a change of Delta can still move a
   snapped score by a whole step, so the effective sensitivity would be the step, not Delta.)
2. The mechanism is run on the gaps ``m_o = min(n_max - n_o, cap)``, integers. Subtracting the
   common n_max changes no selection law, and ``max(n_o, n_max - cap)`` is itself a score of
   sensitivity U (a maximum of U-sensitive functions), so clamping at any public cap keeps the
   privacy proof intact; the cap only touches candidates whose weight is below e^-1024. Gaps are
   int64 while the cap is at most 2^52; a smaller epsilon (a rate below about 2^-42) needs a
   larger cap, and the gaps are then exact Python integers (:func:`gaps_below_max`).
3. Weights are ``exp(-rate * m_o)`` with ``rate`` a float rounded *down* from
   epsilon / (2U) (epsilon / U for monotonic scores), so the effective epsilon never exceeds
   the stated one. Each Bernoulli(exp(-rate * m)) is drawn exactly, as the product of exact
   Bernoulli(exp(-rate * 2^j)) trials over the set bits j of m (``rate * 2^j`` is an exact float).
4. Noise added to scores (report-noisy-max, sparse vector) is exact integer noise in grid units;
   a scale of 2^31 units or more (epsilon below about 1e-3) is drawn in two exact parts, high and low bits
   (:func:`dpkit.noise.geometric_units`), and added in exact integer arithmetic.

The released law is therefore exactly an exponential mechanism with epsilon at most the stated
one, with no floating-point gap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._errors import InternalError, InvalidParameterError
from dpkit._validation import as_fraction, check_data, check_epsilon, check_integer, check_positive, warn_if_risky
from dpkit.events import PrivacyEvent, PureDPEvent
from dpkit.guarantees import PureDP
from dpkit.mechanisms._base import Mechanism, check_noise_range
from dpkit.noise import RandomSource, bernoulli_exp, resolve_source, uniform_integers

__all__ = ["Exponential"]

# Gaps are clamped where the weight exp(-rate * gap) falls below e^-_CLAMP_NATS.
_CLAMP_NATS = 1024
# Gaps up to 2^52 are int64 (float differences of integer-valued scores are exact there); a
# larger cap (a rate below about 2^-42) makes them exact Python integers.
_MAX_GAP = 2**52
# The score grid is 2^-20 of the sensitivity (rounding inflates it by at most one part in 2^20).
_GRID_BITS = 20
# Python-integer gaps are split into int64 halves m = high 2^62 + low for the Bernoulli trials.
_LOW_BITS = 62
_LOW_MASK = (1 << _LOW_BITS) - 1
# Clamps and clips of noisy scores stay at least 2^15 noise scales away (never below 2^52 units):
# a value beyond one moves the noisy comparison with probability at most e^-(2^15).
_CLAMP_SCALE_BITS = 15


# ---------------------------------------------------------------------------------------------
# Shared by the selection mechanisms
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelectionGrid:
    """The public grid 2^exponent on which scores (or query answers) are handled as integers."""

    sensitivity: float
    exponent: int

    @classmethod
    def for_sensitivity(cls, sensitivity: float) -> SelectionGrid:
        """The grid 2^k, k = floor(log2 Delta) - 20, for a score of this sensitivity (public).

        Then Delta / 2^k lies in [2^20, 2^21), so U = floor(Delta / 2^k) + 1 <= (1 + 2^-20) Delta / 2^k.
        The grid does not depend on epsilon: a coarser grid would make the effective sensitivity
        U 2^k >= 2^k, which exceeds Delta once 2^k does (32 Delta at epsilon = 1e-10 with the noise-
        relative grid this replaced). Small epsilons give large noise in grid units instead, which
        the exact integer arithmetic below handles.
        """
        exponent = math.frexp(sensitivity)[1] - 1  # floor(log2 Delta), exactly
        return cls(sensitivity, exponent - _GRID_BITS)

    def units(self, distance: float) -> int:
        """Most grid units two snapped values can differ by when the raw values differ by ``distance``."""
        return math.floor(Fraction(distance) / Fraction(2) ** self.exponent) + 1

    @property
    def sensitivity_units(self) -> int:
        """U = floor(Delta / 2^k) + 1: the sensitivity of the snapped scores, in grid units."""
        return self.units(self.sensitivity)

    def snap(self, name: str, values: NDArray[Any]) -> NDArray[np.float64]:
        """Integer-valued floats rint(values / 2^k) (ldexp and rint are exact)."""
        units = np.rint(np.ldexp(np.asarray(values, dtype=np.float64), -self.exponent))
        if not np.all(np.isfinite(units)):
            raise InvalidParameterError(name, values, "is too large for the score grid of this sensitivity")
        return units


def check_scores(scores: Any, name: str = "scores", *, ndim: int = 1) -> NDArray[Any]:
    """A 1-D (or, with ``ndim=2``, rows x candidates) array of finite real numbers, at least one candidate.

    Integers must be below 2^53 in magnitude.
    """
    array = check_data(name, scores)
    shape = "a non-empty 1-D array" if ndim == 1 else "a 2-D array (rows x candidates, at least one candidate)"
    if array.ndim != ndim or array.shape[-1] == 0 or (ndim == 1 and array.size == 0):
        raise InvalidParameterError(name, scores, f"must be {shape} of finite numbers")
    if array.size == 0:
        return array
    if array.dtype.kind in "iu" and (array.max() >= 2**53 or array.min() <= -(2**53)):
        raise InvalidParameterError(name, scores, "integer scores must be below 2**53 in magnitude")
    return array


def check_candidates(candidates: Any) -> tuple[Any, ...] | None:
    """None, or a non-empty sequence of labels (returned instead of indices)."""
    if candidates is None:
        return None
    if isinstance(candidates, str | bytes) or not isinstance(candidates, Sequence | np.ndarray):
        raise InvalidParameterError("candidates", candidates, "must be None or a non-empty sequence of labels")
    labels = tuple(candidates)
    if not labels:
        raise InvalidParameterError("candidates", candidates, "must be None or a non-empty sequence of labels")
    return labels


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidParameterError(name, value, "must be True or False")
    return value


def rate_down(value: Fraction) -> float:
    """The largest float <= value (a rate that must not exceed its exact value)."""
    rate = float(value)
    if Fraction(rate) > value:
        rate = math.nextafter(rate, 0.0)
    return rate


def scale_up(value: Fraction) -> float:
    """The smallest float >= value (a noise scale that must not fall below its exact value)."""
    scale = float(value)
    if Fraction(scale) < value:
        scale = math.nextafter(scale, math.inf)
    return scale


def gaps_below_max(units: NDArray[np.float64], cap: int) -> NDArray[Any]:
    """min(n_max - n_o, cap) as exact integers (n_max: the maximum of each row, for a 2-D array).

    ``units`` are integer-valued floats. n_max - n_o is an integer; when it is at most 2^53 it
    is representable, so the float subtraction is exact; when it is larger, rounding (monotone)
    keeps it above any float it exceeds. For cap <= 2^52 the result is int64. For a larger cap
    it is an object array of Python integers: differences whose float value is at most 2^52 are
    exact, those whose float value exceeds the cap (rounded up to a float) exceed the cap, and
    the ones in between are recomputed exactly from the integer scores.
    """
    if cap < 0:
        raise InternalError(f"gap cap {cap} is negative")
    top = units.max(axis=-1, keepdims=True)
    with np.errstate(over="ignore"):  # an overflow to inf is a gap beyond any cap: clamped below
        approx = top - units
    if cap <= _MAX_GAP:
        return np.minimum(approx, float(cap)).astype(np.int64)
    cap_up = float(cap)
    if cap_up < cap:
        cap_up = math.nextafter(cap_up, math.inf)
    gaps = np.full(units.shape, cap, dtype=object)
    small = approx <= _MAX_GAP
    gaps[small] = approx[small].astype(np.int64).astype(object)
    tops = np.broadcast_to(top, units.shape)
    for index in zip(*np.nonzero(~small & (approx <= cap_up)), strict=True):
        gaps[index] = min(int(tops[index]) - int(units[index]), cap)
    return gaps


def bernoulli_exp_multiple(rate: float, multiples: NDArray[Any], rng: RandomSource) -> NDArray[np.bool_]:
    """Exact, independent Bernoulli(exp(-rate * m)) trials, one per integer m >= 0.

    exp(-rate m) is the product over the set bits j of m of exp(-rate 2^j); ``rate * 2^j`` is an
    exact float (ldexp), so each factor is an exact :func:`dpkit.noise.bernoulli_exp` trial.
    High bits go first: they reject most proposals, and a rejected one needs no more trials.
    ``multiples`` is int64, or an object array of Python integers below 2^124 (the wide gaps of
    :func:`gaps_below_max`), split as m = high 2^62 + low: exp(-rate m) is then the product of
    exp(-(rate 2^62) high) and exp(-rate low), two independent exact trials.
    """
    multiples = np.asarray(multiples)
    if multiples.dtype == object:
        high = (multiples >> _LOW_BITS).astype(np.int64)  # (an OverflowError at 2^124: never for a cap)
        low = (multiples & _LOW_MASK).astype(np.int64)
        accept = _bernoulli_exp_bits(math.ldexp(rate, _LOW_BITS), high, rng)
        kept = np.flatnonzero(accept)
        accept[kept] = _bernoulli_exp_bits(rate, low[kept], rng)
        return accept
    return _bernoulli_exp_bits(rate, multiples.astype(np.int64), rng)


def _bernoulli_exp_bits(rate: float, multiples: NDArray[np.int64], rng: RandomSource) -> NDArray[np.bool_]:
    accept = np.ones(multiples.size, dtype=bool)
    top = int(multiples.max()).bit_length() if multiples.size else 0
    for bit in reversed(range(top)):
        chosen = np.flatnonzero(accept & ((multiples >> bit) & 1).astype(bool))
        if chosen.size:
            accept[chosen] = bernoulli_exp(np.full(chosen.size, math.ldexp(rate, bit)), rng=rng)
    return accept


def clamp_cap(rate: float) -> int:
    """Gap beyond which weights exp(-rate * gap) < e^-1024 are clamped (see the module docstring).

    Above 2^52 (a rate below about 2^-42, i.e. epsilon below about 1e-6) the gaps are Python
    integers; with epsilon >= 2^-60 and U <= 2^21 the cap is at most about 2^92.
    """
    return math.ceil(Fraction(_CLAMP_NATS) / Fraction(rate))


def noise_clamp(scale: float) -> int:
    """A public clamp (in grid units) for noisy scores with noise of this scale: max(2^52, 2^15 t), a power of 2.

    Clamping a score relative to the maximum (or clipping an answer relative to the threshold)
    is 1-Lipschitz, so any public clamp keeps the sensitivity; this one lies at least 2^15 noise
    scales out, where the noise reaches with probability below e^-(2^15). Up to a scale of 2^36
    (the samplers' own range here) it is 2^52, as it always was.
    """
    return 1 << max(_MAX_GAP.bit_length() - 1, math.frexp(scale)[1] + _CLAMP_SCALE_BITS)


def sample_exponential(gaps: NDArray[Any], rate: float, count: int, rng: RandomSource) -> NDArray[np.int64]:
    """``count`` independent indices o with P(o) proportional to exp(-rate * gaps[o]), exactly.

    Rejection sampling: propose o uniformly, accept with probability exp(-rate * gaps[o]) (at most
    1, equal to 1 at the maximum). Accepted proposals are independent draws from the target law.
    The expected number of proposals per draw is at most the number of candidates.
    """
    n = gaps.size
    out = np.empty(count, dtype=np.int64)
    filled = 0
    acceptance = 1.0 / n
    while filled < count:
        batch = int(min(1 << 20, max(64, (count - filled) / acceptance * 1.2)))
        proposals = uniform_integers(n, batch, rng=rng)
        accepted = proposals[bernoulli_exp_multiple(rate, gaps[proposals], rng)]
        taken = accepted[: count - filled]
        out[filled : filled + taken.size] = taken
        filled += taken.size
        acceptance = max(acceptance, accepted.size / batch)
    return out


#: Most proposals drawn in one round of :func:`sample_exponential_rows` (bounds its memory).
_ROUND_PROPOSALS = 1 << 21


def sample_exponential_rows(gaps: NDArray[Any], rate: float, rng: RandomSource) -> NDArray[np.int64]:
    """One index per row r of the 2-D ``gaps``, P(o) proportional to exp(-rate * gaps[r, o]), exactly.

    The rows are independent and each is the law of :func:`sample_exponential` on that row: every
    row gets its own sequence of uniform proposals with exact Bernoulli(exp(-rate * gap))
    acceptance, and its index is the first accepted proposal of its sequence. The proposals of
    many rows are drawn and tested together, which is what makes this fast; how many a round
    draws for a row is sized from a float estimate of its acceptance rate, which changes the
    running time only, never the law (a timing side channel, as for any rejection sampler).
    """
    rows, n = gaps.shape
    out = np.full(rows, -1, dtype=np.int64)
    if rows == 0:
        return out
    # Expected acceptance of one proposal per row (the maximum has weight 1, so it is >= 1 / n).
    acceptance = np.maximum(np.exp(-rate * gaps.astype(np.float64)).mean(axis=1), 1.0 / n)
    # About two acceptances expected per row and round: a row is left for the next round with
    # probability about e^-2.
    wanted = np.minimum(np.ceil(2.0 / acceptance), float(_ROUND_PROPOSALS)).astype(np.int64)
    pending = np.arange(rows)
    while pending.size:
        sizes = wanted[pending]
        take = max(1, int(np.searchsorted(np.cumsum(sizes), _ROUND_PROPOSALS, side="right")))
        batch, sizes = pending[:take], sizes[:take]
        owners = np.repeat(batch, sizes)  # non-decreasing: each row's proposals are contiguous, in order
        proposals = uniform_integers(n, owners.size, rng=rng)
        accepted = np.flatnonzero(bernoulli_exp_multiple(rate, gaps[owners, proposals], rng))
        done, first = np.unique(owners[accepted], return_index=True)
        out[done] = proposals[accepted[first]]
        pending = np.concatenate((batch[out[batch] < 0], pending[take:]))
    return out


class GridSelectionMechanism(Mechanism):
    """Common state and privacy accounting of the mechanisms run on a public :class:`SelectionGrid`.

    Privacy contract: a subclass validates ``sensitivity`` (Delta in [2**-1000, 2**1000]) and
    ``epsilon`` (in [2**-60, 1024], see :func:`~dpkit.mechanisms._base.check_noise_range`)
    here before any other parameter, then calls :meth:`_calibrate` once all its parameters are
    valid, and calibrates its rate or noise to U = floor(Delta / 2^k) + 1 grid units (the
    effective sensitivity U 2^k) rounded toward safety, so that one release (for
    :class:`~dpkit.mechanisms.sparse_vector.SparseVector`, one whole run) is epsilon-DP for
    inputs whose scores move by at most Delta. The guarantee, event and privacy map below state
    exactly that. The grid depends on the sensitivity only, so the effective sensitivity is at
    most (1 + 2^-20) Delta for every epsilon the constructor accepts (no epsilon is refused for
    being small: small epsilons give large noise in grid units, handled exactly).
    """

    _candidates: tuple[Any, ...] | None = None
    # Gap clamp of the subclasses that select among candidates (see :func:`gaps_below_max`).
    _cap: int

    def __init__(self, sensitivity: float, epsilon: float) -> None:
        self._sensitivity = check_positive("sensitivity", sensitivity)
        self._epsilon = check_epsilon(epsilon)
        check_noise_range(self._sensitivity, self._epsilon)
        self._epsilon_exact = as_fraction(self._epsilon)

    def _calibrate(self) -> None:
        """Warn about a risky epsilon and fix the score grid (from the sensitivity only)."""
        warn_if_risky(self._epsilon)
        self._grid = SelectionGrid.for_sensitivity(self._sensitivity)

    @property
    def sensitivity(self) -> float:
        return self._sensitivity

    @property
    def epsilon(self) -> float:
        return self._epsilon

    @property
    def grid_exponent(self) -> int:
        """k: scores (for sparse vector, answers and threshold) are rounded to multiples of 2^k before selection."""
        return self._grid.exponent

    @property
    def effective_sensitivity(self) -> float:
        """(floor(Delta / 2^k) + 1) 2^k <= Delta + 2^k: the sensitivity the rate or noise is calibrated to."""
        return math.ldexp(self._grid.sensitivity_units, self._grid.exponent)

    @property
    def guarantee(self) -> PureDP:
        """The cost of one release (for sparse vector, of one whole run: any number of queries, at most c positives)."""
        return PureDP(self._epsilon)

    @property
    def event(self) -> PrivacyEvent:
        return PureDPEvent(self._epsilon)

    def privacy_map(self, d_in: float) -> PureDP:
        """epsilon * u(d_in) / u(Delta) where u(d) = floor(d / 2^k) + 1 (grid units after rounding).

        This is epsilon d_in / Delta up to the grid (a few parts in a million above it for
        d_in < Delta, exact at d_in = Delta), rounded toward safety (up).
        """
        distance = check_positive("d_in", d_in)
        return PureDP(self._epsilon_exact * self._grid.units(distance) / self._grid.sensitivity_units)  # type: ignore[arg-type]

    def _gaps(self, scores: Any, cap: int | None = None, *, ndim: int = 1) -> NDArray[Any]:
        """min(n_max - n_o, cap) for the snapped scores (cap defaults to the mechanism's ``_cap``).

        ``ndim=2``: one score vector per row, each row's gaps below its own maximum.
        """
        array = check_scores(scores, ndim=ndim)
        if self._candidates is not None and array.shape[-1] != len(self._candidates):
            raise InvalidParameterError(
                "scores", scores, f"must have one score per candidate ({len(self._candidates)})"
            )
        return gaps_below_max(self._grid.snap("scores", array), self._cap if cap is None else cap)

    def _label(self, index: int) -> Any:
        return index if self._candidates is None else self._candidates[index]


# ---------------------------------------------------------------------------------------------
# The exponential mechanism
# ---------------------------------------------------------------------------------------------


class Exponential(GridSelectionMechanism):
    """The exponential mechanism: release o with probability proportional to exp(epsilon s(D, o) / (2 Delta)).

    McSherry & Talwar (2007); Dwork & Roth (2014), Def. 3.4 and Thm. 3.10: epsilon-DP for a
    score whose value for every candidate moves by at most ``sensitivity`` between neighbours.
    With ``monotonic=True`` (scores of all candidates move in the same direction between
    neighbours, e.g. counts) the exponent is epsilon s / Delta, still epsilon-DP (the ratio of
    normalising constants then costs nothing; McSherry & Talwar 2007).

    Exactness: scores are rounded to a public grid of 2^k and calibrated to the effective
    sensitivity floor(Delta / 2^k) 2^k + 2^k <= Delta + 2^k; sampling is exact rejection
    sampling (uniform proposal, exact Bernoulli(exp(-x)) acceptance), so the released law is
    exactly the one :meth:`probabilities` reports and its epsilon is at most ``epsilon``. The
    running time (number of proposals) depends on the scores: a timing side channel, as for any
    rejection sampler.

    Parameters: ``sensitivity`` (Delta > 0), ``epsilon`` (> 0), ``candidates`` (optional
    labels, returned instead of indices), ``monotonic``.

    >>> from dpkit.noise import InsecureSeededRandom
    >>> mechanism = Exponential(sensitivity=1.0, epsilon=1.0, candidates=["a", "b", "c"])
    >>> mechanism.guarantee
    PureDP(epsilon=1.0)
    >>> mechanism.release([1.0, 10.0, 2.0], rng=InsecureSeededRandom(0))
    'b'
    >>> mechanism.probabilities([1.0, 10.0, 2.0]).round(4).tolist()
    [0.0108, 0.9714, 0.0178]
    """

    def __init__(
        self, sensitivity: float, epsilon: float, candidates: Sequence[Any] | None = None, monotonic: bool = False
    ) -> None:
        super().__init__(sensitivity, epsilon)
        self._candidates = check_candidates(candidates)
        self._monotonic = check_flag("monotonic", monotonic)
        factor = 1 if self._monotonic else 2
        self._calibrate()
        self._rate = rate_down(self._epsilon_exact / (factor * self._grid.sensitivity_units))
        self._cap = clamp_cap(self._rate)

    @property
    def candidates(self) -> tuple[Any, ...] | None:
        return self._candidates

    @property
    def monotonic(self) -> bool:
        return self._monotonic

    def probabilities(self, scores: Any) -> NDArray[np.float64]:
        """The exact output law of :meth:`release` for these scores, as floats (computed stably).

        For tests and analysis only: the probabilities depend on the private scores.
        """
        gaps = self._gaps(scores)
        weights = np.exp(-self._rate * gaps.astype(np.float64))  # the maximum has weight 1
        return weights / weights.sum()

    def release(self, value: Any, *, rng: RandomSource | None = None) -> Any:
        """One candidate (index, or label when ``candidates`` was given) for the score vector ``value``."""
        gaps = self._gaps(value)
        source = resolve_source(rng)
        return self._label(int(sample_exponential(gaps, self._rate, 1, source)[0]))

    def release_rows(self, values: Any, *, rng: RandomSource | None = None) -> list[Any]:
        """One independent selection per row of the 2-D score array ``values`` (rows x candidates).

        Each row gets exactly the law of :meth:`release` on that row, drawn independently; the
        rows are sampled together, which is much faster than one :meth:`release` per row. Privacy
        contract: every row is a release of its own, so m rows cost m times :attr:`guarantee`
        by basic composition, or :attr:`guarantee` once when each row's scores are computed from
        a disjoint part of the data (parallel composition, e.g. one row per group of a GROUP BY).

        >>> from dpkit.noise import InsecureSeededRandom
        >>> mechanism = Exponential(sensitivity=1.0, epsilon=1.0, candidates=["a", "b", "c"])
        >>> mechanism.release_rows([[1.0, 10.0, 2.0], [30.0, 0.0, 0.0]], rng=InsecureSeededRandom(0))
        ['b', 'a']
        """
        gaps = self._gaps(values, ndim=2)
        indices = sample_exponential_rows(gaps, self._rate, resolve_source(rng))
        return [self._label(int(i)) for i in indices]

    def utility_bound(self, num_candidates: int, t: float, num_optimal: int = 1) -> float:
        """Gap g with P[s(output) <= OPT - g] <= e^-t (the utility theorem, seed 000; Dwork & Roth Thm. 3.11).

        The textbook gap is (2 Delta / epsilon)(ln(|O| / |O*|) + t), with |O*| the number of
        candidates of optimal score. This returns the gap that holds for the released law:
        Delta replaced by the effective sensitivity, plus one grid step for the rounding of the
        scores (a relative increase of at most 2^-20, about 1e-6, at every epsilon). Requires
        ln(|O| / |O*|) + t <= 1024 (the clamping of negligible weights).

        >>> round(Exponential(1.0, 1.0).utility_bound(100, t=3.0), 3)
        15.21
        """
        n = check_integer("num_candidates", num_candidates, minimum=1)
        optimal = check_integer("num_optimal", num_optimal, minimum=1)
        if optimal > n:
            raise InvalidParameterError("num_optimal", num_optimal, f"must be at most num_candidates ({n})")
        tail = check_positive("t", t)
        log_ratio = math.log(n / optimal)
        if log_ratio + tail > _CLAMP_NATS:
            raise InvalidParameterError("t", t, f"ln(num_candidates / num_optimal) + t must be at most {_CLAMP_NATS}")
        # P[n_out <= n_max - g] <= (|O| / |O*|) e^{-rate g} for the snapped scores; the rounding
        # of scores to the grid costs one more grid step between real and snapped gaps.
        gap_units = (log_ratio + tail) / self._rate + 1.0
        return math.nextafter(math.ldexp(gap_units, self._grid.exponent), math.inf)

    def __repr__(self) -> str:
        return (
            f"Exponential(sensitivity={self._sensitivity}, epsilon={self._epsilon}, "
            f"candidates={self._candidates!r}, monotonic={self._monotonic})"
        )
